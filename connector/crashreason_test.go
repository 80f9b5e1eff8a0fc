package connector_test

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kvconnect/kvconnect/internal/testbin"
)

// TestPluginCrashSaysHowItEnded: when a plugin dies, the log line and the
// transport's problem say how (the signal or the exit status), not only
// that its process exited.
func TestPluginCrashSaysHowItEnded(t *testing.T) {
	a, logs := authNode(t, "")
	pid := a.Status().PluginPID
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(testbin.WaitLimit)
	for {
		died := logs.FilterMessage("transport plugin died; restarting it").All()
		if len(died) > 0 {
			ended, _ := died[0].ContextMap()["ended"].(string)
			if !strings.Contains(ended, "killed by SIGKILL") {
				t.Fatalf("the crash log says ended %q, want the signal (SIGKILL)", ended)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no crash logged after the plugin was killed")
		}
		time.Sleep(20 * time.Millisecond) // polling the log
	}
}
