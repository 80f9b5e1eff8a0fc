package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvconnect/kvconnect/cmd/kvconnect/internal/bench"
	"github.com/kvconnect/kvconnect/internal/testbin"
)

// benchPluginDir builds the tcp plugin binary and returns its directory;
// the CLI under test reads no plugin directory from the environment.
func benchPluginDir(t *testing.T) string {
	t.Helper()
	t.Setenv("KVCONNECT_PLUGIN_DIR", "")
	return testbin.PluginDir(t, "tcp")
}

// syncBuffer is a bytes.Buffer safe to read while a command writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func runBenchCLI(ctx context.Context, stdout, stderr *syncBuffer, args ...string) error {
	root := newRootCommand()
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetArgs(append([]string{"bench"}, args...))
	return root.ExecuteContext(ctx)
}

// benchJSON runs bench with --json and decodes the result.
func benchJSON(t *testing.T, args ...string) (bench.Result, error) {
	t.Helper()
	var out, errOut syncBuffer
	err := runBenchCLI(context.Background(), &out, &errOut, append([]string{"--json"}, args...)...)
	var r bench.Result
	if jerr := json.Unmarshal([]byte(out.String()), &r); jerr != nil {
		t.Fatalf("bench %v: output is not a JSON result (%v; command error %v):\n%s\nstderr:\n%s", args, jerr, err, out.String(), errOut.String())
	}
	if strings.Contains(errOut.String(), "\r") {
		t.Errorf("progress line written although stderr is not a terminal: %q", errOut.String())
	}
	return r, err
}

func checkBenchResult(t *testing.T, r bench.Result) {
	t.Helper()
	if r.Bytes == 0 || r.Ops == 0 || r.Batches == 0 || r.GBps <= 0 || r.OpsPerSec <= 0 || r.Seconds <= 0 {
		t.Fatalf("nothing measured: %+v", r)
	}
	if r.LatencyP50 <= 0 || r.LatencyP50 > r.LatencyP99 {
		t.Fatalf("latency p50 %v > p99 %v", r.LatencyP50, r.LatencyP99)
	}
	if r.HostCPU < 0 || r.PluginCPU < 0 {
		t.Fatalf("negative CPU seconds: host %v plugin %v", r.HostCPU, r.PluginCPU)
	}
	if r.Unit != "GB/s (1 GB = 1e9 B)" || r.Transport != "tcp" {
		t.Fatalf("unit %q transport %q", r.Unit, r.Transport)
	}
}

var smallRun = []string{"--block-size", "16KiB", "--batch-size", "8", "--threads", "2", "--duration", "200ms", "--buffer-size", "1MiB"}

func TestBenchLoopbackWriteVerify(t *testing.T) {
	dir := benchPluginDir(t)
	r, err := benchJSON(t, append([]string{"--operation", "write", "--verify", "--plugin-dir", dir}, smallRun...)...)
	if err != nil {
		t.Fatal(err)
	}
	checkBenchResult(t, r)
	if r.Mode != "plugin" || len(r.PluginPIDs) != 2 || r.Operation != "write" || r.BlockSize != 16<<10 || r.BatchSize != 8 || r.Threads != 2 {
		t.Fatalf("run shape: %+v", r)
	}
	v := r.Verify
	if v == nil || !v.OK || v.By != "initiator (read back)" || v.Checked == 0 || v.Mismatched != 0 || v.Blocks == "" {
		t.Fatalf("verification: %+v", v)
	}
}

// TestBenchVerifyCatchesCorruption damages a block of the target's buffer
// through the test hook: verification must report it and the command fail.
func TestBenchVerifyCatchesCorruption(t *testing.T) {
	dir := benchPluginDir(t)
	for _, op := range []string{"write", "read"} {
		r, err := benchJSON(t, append([]string{"--operation", op, "--verify", "--verify-corrupt-block", "0", "--plugin-dir", dir}, smallRun...)...)
		if err == nil || !strings.Contains(err.Error(), "--verify") || !strings.Contains(err.Error(), "1 differ") {
			t.Fatalf("%s: command error %v, want a --verify failure naming 1 bad block", op, err)
		}
		v := r.Verify
		if v == nil || v.OK || v.Mismatched != 1 || len(v.FirstBad) != 1 || v.FirstBad[0] != 0 || v.Checked < 2 {
			t.Fatalf("%s: verification: %+v", op, v)
		}
	}
}

func TestBenchLoopbackReadInProcess(t *testing.T) {
	dir := benchPluginDir(t)
	// Mooncake's flag spelling works too.
	r, err := benchJSON(t, "--operation", "read", "--in-process", "--verify", "--plugin-dir", dir,
		"--block_size", "4KiB", "--batch_size", "4", "--threads", "1", "--duration", "100ms", "--buffer_size", "256KiB")
	if err != nil {
		t.Fatal(err)
	}
	checkBenchResult(t, r)
	if r.Mode != "in-process" || len(r.PluginPIDs) != 0 || r.PluginCPU != 0 || r.BlockSize != 4096 {
		t.Fatalf("in-process run: %+v", r)
	}
	if v := r.Verify; v == nil || !v.OK || v.By != "initiator" || v.Checked == 0 {
		t.Fatalf("verification: %+v", v)
	}
}

// TestBenchTargetInitiator runs the two modes against each other.
func TestBenchTargetInitiator(t *testing.T) {
	dir := benchPluginDir(t)
	ctx, cancel := context.WithCancel(context.Background())
	var tout, terr syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- runBenchCLI(ctx, &tout, &terr, "--mode", "target", "--buffer-size", "1MiB", "--plugin-dir", dir)
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("target: %v\n%s", err, terr.String())
		}
	}()
	session := ""
	for deadline := time.Now().Add(testbin.WaitLimit); session == "" && time.Now().Before(deadline); {
		for _, line := range strings.Split(tout.String(), "\n") {
			if s, ok := strings.CutPrefix(line, "session="); ok {
				session = s
			}
		}
		select {
		case err := <-done:
			t.Fatalf("target exited: %v\n%s", err, terr.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	if session == "" {
		t.Fatalf("target printed no session line:\n%s\n%s", tout.String(), terr.String())
	}
	for _, op := range []string{"write", "read"} {
		r, err := benchJSON(t, append([]string{"--mode", "initiator", "--segment-id", session, "--operation", op, "--verify", "--plugin-dir", dir}, smallRun...)...)
		if err != nil {
			t.Fatalf("initiator %s: %v", op, err)
		}
		checkBenchResult(t, r)
		if r.Peer != session || len(r.PluginPIDs) != 1 || r.Verify == nil || !r.Verify.OK {
			t.Fatalf("initiator %s: %+v, verify %+v", op, r, r.Verify)
		}
	}
}

// TestBenchRawServer runs the suite's raw baseline server mode: it says
// where it listens, accepts connections and ends when stdin does.
func TestBenchRawServer(t *testing.T) {
	stdinR, stdinW := io.Pipe()
	var out, errOut syncBuffer
	root := newRootCommand()
	root.SetIn(stdinR)
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs([]string{"bench", "--raw-server", "--buffer-size", "64KiB"})
	done := make(chan error, 1)
	go func() { done <- root.Execute() }()
	addr := ""
	for deadline := time.Now().Add(testbin.WaitLimit); addr == "" && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if a, ok := strings.CutPrefix(strings.TrimSpace(out.String()), "raw-server="); ok {
			addr = a
		}
	}
	if addr == "" {
		stdinW.Close()
		t.Fatalf("no raw-server= line: %q %q %v", out.String(), errOut.String(), <-done)
	}
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
	stdinW.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(testbin.WaitLimit):
		t.Fatal("the raw server did not end with its stdin")
	}
}

func TestBenchBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--mode", "server"}, `--mode "server": must be target, initiator or loopback`},
		{[]string{"--mode", "initiator"}, "--mode initiator needs --segment-id"},
		{[]string{"--segment-id", "127.0.0.1:1"}, "--segment-id \"127.0.0.1:1\": only with --mode initiator"},
		{[]string{"--operation", "copy"}, `--operation "copy": must be read or write`},
		{[]string{"--block-size", "0"}, `--block-size "0": must be at least 1 byte`},
		{[]string{"--block-size", "lots"}, `--block-size "lots"`},
		{[]string{"--block-size", "2MiB", "--buffer-size", "1MiB"}, "--block-size 2MiB is larger than --buffer-size 1MiB"},
		{[]string{"--batch-size", "0"}, "--batch-size 0: must be between 1 and"},
		{[]string{"--threads", "0"}, "--threads 0: must be between 1 and"},
		{[]string{"--duration", "soon"}, `--duration "soon"`},
		{[]string{"--duration", "0"}, "--duration 0s: must be positive"},
		{[]string{"--rounds", "3"}, "--rounds: only with --suite"},
		{[]string{"--out", "x.md"}, "--out: only with --suite"},
		{[]string{"--suite", "--verify"}, "--verify: not used with --suite"},
		{[]string{"--suite", "--rounds", "0"}, "--rounds 0: must be at least 1"},
		{[]string{"--suite", "--block-size", "64KiB,x"}, `--block-size "x"`},
	} {
		var out, errOut syncBuffer
		err := runBenchCLI(context.Background(), &out, &errOut, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("bench %v: got error %v, want one containing %q", tc.args, err, tc.want)
		}
	}
}

// TestBenchSuiteRefusesZeros: --suite fills in its defaults for what is
// not given; a zero given is an error naming the flag (it was replaced
// by the default), before any node starts.
func TestBenchSuiteRefusesZeros(t *testing.T) {
	for _, c := range []struct{ flag, value string }{{"--threads", "0"}, {"--batch-size", "0"}, {"--duration", "0"}, {"--duration", "0.0000000001"}} {
		// (--rounds 0 is refused after these checks: no suite ever starts)
		out, err := runConfigCLI(t, nil, "bench", "--suite", c.flag, c.value, "--rounds", "0")
		if err == nil || !strings.Contains(err.Error(), c.flag) {
			t.Errorf("bench --suite %s %s: %v, want an error naming %s\n%s", c.flag, c.value, err, c.flag, out)
		}
	}
}

// TestBenchFlagsThatDoNothingAreRefused: a flag the chosen mode would
// ignore (a workload given to a target, a profile of a suite, a suite's
// binaries outside it) is an error naming it, before anything starts.
func TestBenchFlagsThatDoNothingAreRefused(t *testing.T) {
	for _, args := range [][]string{
		{"bench", "--suite", "--cpuprofile", "x.prof"},
		{"bench", "--suite", "--trace", "x.trace"},
		{"bench", "--mode", "target", "--verify"},
		{"bench", "--mode", "target", "--duration", "5s"},
		{"bench", "--mode", "target", "--block-size", "16KiB"},
		{"bench", "--mooncake-bin", "/nowhere"},
		{"bench", "--floor-bin", "/nowhere"},
	} {
		flag := ""
		for _, a := range args {
			if strings.HasPrefix(a, "--") && a != "--suite" && a != "--mode" {
				flag = a
			}
		}
		// A bad value checked later guards the run: even where the flag
		// is not refused, nothing starts (the error then names the guard).
		guard := []string{"--buffer-size", "0"}
		if args[1] == "--suite" {
			guard = []string{"--rounds", "0"}
		}
		_, err := runConfigCLI(t, nil, append(args, guard...)...)
		if err == nil || !strings.Contains(err.Error(), flag) {
			t.Errorf("kvconnect %q: %v, want an error naming %s", args, err, flag)
		}
	}
}
