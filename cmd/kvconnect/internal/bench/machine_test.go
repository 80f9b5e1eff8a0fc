package bench

import (
	"os"
	"strings"
	"testing"
)

// The report names the TCP congestion control every variant's sockets
// get, read from the kernel, and leaves the line out where it is unknown.
func TestReportNamesCongestionControl(t *testing.T) {
	if b, err := os.ReadFile(congestionFile); err == nil {
		if got, want := DescribeMachine().TCP, strings.TrimSpace(string(b)); got != want {
			t.Errorf("DescribeMachine().TCP = %q, the kernel says %q", got, want)
		}
	}
	for _, cc := range []string{"cubic", ""} {
		var out strings.Builder
		res := &SuiteResult{Machine: Machine{CPU: "test CPU", Cores: 2, TCP: cc}}
		res.WriteMarkdown(&out, true)
		line := "- TCP congestion control: " + cc + " ("
		if has := strings.Contains(out.String(), "- TCP congestion control:"); has != (cc != "") || (cc != "" && !strings.Contains(out.String(), line)) {
			t.Errorf("TCP %q: report has the line: %v, want %v (%q)", cc, has, cc != "", line)
		}
	}
}

// The load line blames the end's load on Mooncake's polling initiators
// only when Mooncake's variants ran.
func TestReportLoadLineNamesMooncakeOnlyWhenItRan(t *testing.T) {
	for _, ran := range []bool{false, true} {
		res := &SuiteResult{Machine: Machine{CPU: "test CPU", Cores: 2, LoadStart: "0.10 0.20 0.30", LoadEnd: "4.00 3.00 2.00"},
			Variants: []VariantStatus{{Name: VariantMCPtoMC, Available: ran}}}
		var out strings.Builder
		res.WriteMarkdown(&out, true)
		got := strings.Contains(out.String(), "Mooncake's initiator polls")
		if got != ran {
			t.Errorf("Mooncake variants ran: %v; load line blames them: %v", ran, got)
		}
		if !strings.Contains(out.String(), "- Load average (1/5/15 min): 0.10 0.20 0.30 at the start, 4.00 3.00 2.00 at the end.") {
			t.Errorf("ran %v: no load line in the report", ran)
		}
	}
}
