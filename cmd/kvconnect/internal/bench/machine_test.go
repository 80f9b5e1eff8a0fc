package bench

import (
	"bufio"
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

// TestParseCPUInfo reads the first processor's model name, family and
// model, not a later processor's, and a platform without the numbers
// (arm64's cpuinfo has none of these keys) gives the name alone.
func TestParseCPUInfo(t *testing.T) {
	for _, tc := range []struct{ text, name, family, model, typ string }{
		{"processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 26\nmodel\t\t: 2\nmodel name\t: AMD EPYC\nflags\t\t: fpu erms fsrm\n\nprocessor\t: 1\ncpu family\t: 25\nmodel\t\t: 9\nmodel name\t: Other\n",
			"AMD EPYC", "26", "2", "AMD EPYC (family 26, model 2)"},
		{"processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd\nCPU implementer\t: 0x41\n\n", "unknown", "", "", "unknown"},
		{"", "unknown", "", "", "unknown"},
	} {
		name, family, model := parseCPUInfo(bufio.NewScanner(strings.NewReader(tc.text)))
		if name != tc.name || family != tc.family || model != tc.model {
			t.Errorf("parseCPUInfo(%q) = %q, %q, %q; want %q, %q, %q", tc.text, name, family, model, tc.name, tc.family, tc.model)
		}
		if got := (Machine{CPU: name, Family: family, Model: model}).CPUType(); got != tc.typ {
			t.Errorf("CPUType = %q, want %q", got, tc.typ)
		}
	}
}
