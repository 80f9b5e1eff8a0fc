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
