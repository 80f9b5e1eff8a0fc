package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
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
	cmd.Env = append(os.Environ(), "KVCONNECT_PLUGIN_DIR=")
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
			// It exits in milliseconds (no plugin is started before the
			// listener); runServe fails the test if it hangs.
		})
	}
}

// TestDoctorFailsOnUnresolvableHostname: doctor exits non-zero, naming
// the hostname and why.
func TestDoctorFailsOnUnresolvableHostname(t *testing.T) {
	t.Setenv("KVCONNECT_PLUGIN_DIR", "")
	out, err := runCLI(t, "doctor", "--hostname", "no-such-host.invalid", "--plugin-dir", pluginDir(t))
	var ee exitError
	if !errors.As(err, &ee) || ee.code != 1 || !strings.Contains(out, `hostname "no-such-host.invalid" does not resolve`) {
		t.Fatalf("doctor with an unresolvable hostname: %v\n%s", err, out)
	}
}

// startServe runs kvconnect serve in the background and returns its
// session id, the process, and its stderr so far.
func startServe(t *testing.T, args ...string) (string, *exec.Cmd, *syncBuffer) {
	t.Helper()
	cmd := exec.Command(kvconnectBin(t), append([]string{"serve", "--log-level", "info", "--log-format", "json"}, args...)...)
	cmd.Env = append(os.Environ(), "KVCONNECT_PLUGIN_DIR=")
	var out, errOut syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	deadline := time.Now().Add(30 * time.Second)
	for {
		var st struct{ Session string }
		if line, _, ok := strings.Cut(out.String(), "\n"); ok && json.Unmarshal([]byte(line), &st) == nil && st.Session != "" {
			return st.Session, cmd, &errOut
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve printed no status within 30 s:\n%s\n%s", out.String(), errOut.String())
		}
		time.Sleep(10 * time.Millisecond) // waiting for its status line
	}
}

// probe sends a handshake Probe and reports whether it was answered.
func probe(session string) bool {
	nc, err := net.DialTimeout("tcp", session, time.Second)
	if err != nil {
		return false
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(2 * time.Second))
	nc.Write([]byte{3, 0, 0, 0, 0, 0, 0, 0, 3, '{', '}'})
	var hdr [9]byte
	_, err = io.ReadFull(nc, hdr[:])
	return err == nil && hdr[8] == 3
}

// TestRPCListenerSurvivesEMFILE: when the node runs out of file
// descriptors, its handshake listener backs off, says so once, and
// answers again once descriptors are free (it used to stop for good).
func TestRPCListenerSurvivesEMFILE(t *testing.T) {
	if _, err := exec.LookPath("prlimit"); err != nil {
		t.Skip("prlimit (util-linux) is not installed")
	}
	session, cmd, stderr := startServe(t)
	pid := strconv.Itoa(cmd.Process.Pid)
	if out, err := exec.Command("prlimit", "--pid", pid, "--nofile=48:").CombinedOutput(); err != nil {
		t.Skipf("prlimit --pid refused here: %v %s", err, out)
	}
	var conns []net.Conn
	defer func() {
		for _, nc := range conns {
			nc.Close()
		}
	}()
	deadline := time.Now().Add(testbin.WaitLimit)
	for !strings.Contains(stderr.String(), "accept failed; retrying") {
		if time.Now().After(deadline) {
			t.Fatalf("no accept failure reported with %d idle connections under a limit of 48:\n%s", len(conns), stderr.String())
		}
		if nc, err := net.DialTimeout("tcp", session, time.Second); err == nil {
			conns = append(conns, nc)
		}
	}
	for _, nc := range conns {
		nc.Close()
	}
	conns = nil
	if out, err := exec.Command("prlimit", "--pid", pid, "--nofile=4096:").CombinedOutput(); err != nil {
		t.Fatalf("restoring the limit: %v %s", err, out)
	}
	deadline = time.Now().Add(testbin.WaitLimit)
	for !probe(session) {
		if time.Now().After(deadline) {
			t.Fatalf("the handshake listener did not answer again after EMFILE:\n%s", stderr.String())
		}
		time.Sleep(20 * time.Millisecond) // polling the listener
	}
	if n := strings.Count(stderr.String(), "accept failed; retrying"); n > 3 {
		t.Errorf("%d accept-failure lines for one burst: not rate-limited", n)
	}
}

// TestServeCleanShutdownOnGroupSIGTERM: a SIGTERM to the whole process
// group (what systemd and a shell do) ends serve with status 0 and no
// ERROR line: the plugin does not die first.
func TestServeCleanShutdownOnGroupSIGTERM(t *testing.T) {
	cmd := exec.Command(kvconnectBin(t), "serve", "--log-level", "info", "--log-format", "json")
	cmd.Env = append(os.Environ(), "KVCONNECT_PLUGIN_DIR=")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var out, errOut syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(out.String(), `"session"`) {
		if time.Now().After(deadline) {
			t.Fatalf("serve did not come up:\n%s", errOut.String())
		}
		time.Sleep(10 * time.Millisecond) // waiting for its status line
	}
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve exited with %v after SIGTERM:\n%s", err, errOut.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not exit within 30 s of SIGTERM")
	}
	for _, line := range strings.Split(errOut.String(), "\n") {
		if strings.Contains(line, `"level":"error"`) {
			t.Errorf("an ERROR line on a clean shutdown: %s", line)
		}
	}
	if !strings.Contains(errOut.String(), "kvconnect node closed") {
		t.Errorf("no closing line:\n%s", errOut.String())
	}
}
