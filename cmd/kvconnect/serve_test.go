package main

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvconnect/kvconnect/internal/testbin"
)

// kvconnectBin builds the CLI (with the plugins beside it).
func kvconnectBin(t *testing.T) string {
	t.Helper()
	dir := pluginDir(t)
	bin, err := testbin.Build("./cmd/kvconnect", "kvconnect")
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(bin) != dir {
		t.Fatalf("the CLI (%s) and the plugins (%s) are not side by side", bin, dir)
	}
	return bin
}

// runServe runs kvconnect serve with args to completion (bounded) and
// returns its exit code, what it printed and how long it took.
func runServe(t *testing.T, args ...string) (int, string, time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, kvconnectBin(t), append([]string{"serve", "--log-level", "warn"}, args...)...)
	cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0", "KVCONNECT_PLUGIN_DIR=")
	start := time.Now()
	out, err := cmd.CombinedOutput()
	took := time.Since(start)
	if ctx.Err() != nil {
		t.Fatalf("kvconnect serve %v did not exit within 30 s (it hangs):\n%s", args, out)
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), string(out), took
}

// TestServeFailsFastOnBadListenAddress: a taken RPC port, or a bind
// address this host does not have, ends serve at once with exit status 1
// and an error naming the address, the port and the cause; no plugin
// was started.
func TestServeFailsFastOnBadListenAddress(t *testing.T) {
	taken, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	port := strconv.Itoa(taken.Addr().(*net.TCPAddr).Port)
	for _, tc := range []struct {
		name string
		args []string
		says []string
	}{
		{"rpc port taken", []string{"--rpc-port", port}, []string{"port " + port, "address in use"}},
		{"bind address not on this host", []string{"--bind-address", "192.0.2.254"}, []string{"192.0.2.254", "not an address of this host"}},
		{"hostname does not resolve", []string{"--hostname", "no-such-host.invalid"}, []string{`"no-such-host.invalid"`, "does not resolve"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, took := runServe(t, tc.args...)
			t.Logf("exit %d after %v: %s", code, took, strings.TrimSpace(out))
			if code != 1 {
				t.Fatalf("exit status %d, want 1", code)
			}
			for _, s := range tc.says {
				if !strings.Contains(out, s) {
					t.Errorf("the error does not say %q", s)
				}
			}
			// The bound is generous for a loaded machine; it exits in
			// milliseconds (no plugin is started before the listener).
			if took > 5*time.Second {
				t.Errorf("serve took %v to fail", took)
			}
		})
	}
}

// TestDoctorFailsOnUnresolvableHostname: doctor exits non-zero, naming
// the hostname and why.
func TestDoctorFailsOnUnresolvableHostname(t *testing.T) {
	t.Setenv("KVCONNECT_PLUGIN_DIR", "")
	t.Setenv("GORACE", "atexit_sleep_ms=0")
	out, err := runCLI(t, "doctor", "--hostname", "no-such-host.invalid", "--plugin-dir", pluginDir(t))
	var ee exitError
	if !errors.As(err, &ee) || ee.code != 1 || !strings.Contains(out, `hostname "no-such-host.invalid" does not resolve`) {
		t.Fatalf("doctor with an unresolvable hostname: %v\n%s", err, out)
	}
}
