package metadata

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// ctxT is a context bounded for one test step.
func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// openT opens a Service closed when the test ends.
func openT(t *testing.T, o Options) Service {
	t.Helper()
	if o.ConnectTimeout == 0 {
		o.ConnectTimeout = 5 * time.Second
	}
	s, err := Open(ctxT(t), o)
	if err != nil {
		t.Fatalf("Open(%s): %v", o.URL, err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}

// descriptor is a kvconnect-style segment descriptor for name.
func descriptor(name string, version int) []byte {
	b, _ := json.Marshal(map[string]any{
		"name": name, "protocol": "tcp", "tcp_data_port": 16000, "tcp_proto_version": 2, "timestamp": "2026-12-01 10:00:00",
		"buffers":   []map[string]any{{"name": name, "addr": 140664136269824, "length": 67108864}},
		"kvconnect": map[string]any{"version": 2, "protocol": "tcp", "regions_version": version},
	})
	return b
}

func rpcOf(port int) RPCLocation { return RPCLocation{Host: "127.0.0.1", Port: port} }

// noLeaks fails the test if goroutines started during it outlive it:
// call it first; it checks when the test's cleanups have run.
func noLeaks(t *testing.T) {
	t.Helper()
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(5 * time.Second)
		for runtime.NumGoroutine() > before {
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<20)
				n := runtime.Stack(buf, true)
				t.Errorf("%d goroutines before the test, %d after:\n%s", before, runtime.NumGoroutine(), buf[:n])
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
}

// observed returns a logger that records entries.
func observed() (*zap.Logger, *observer.ObservedLogs) {
	core, logs := observer.New(zap.DebugLevel)
	return zap.New(core), logs
}

// Helper node: a process that opens a Service, publishes a segment and
// waits to be killed, so tests can kill -9 a real node.
const (
	envHelper    = "KVCONNECT_METADATA_TEST_NODE"
	envHelperURL = "KVCONNECT_METADATA_TEST_URL"
	envHelperPwd = "KVCONNECT_METADATA_TEST_PASSWORD"
)

// TestHelperNode is the helper node's body; it does nothing in a normal
// test run.
func TestHelperNode(t *testing.T) {
	segment := os.Getenv(envHelper)
	if segment == "" {
		t.Skip("helper process for the node-killed tests")
	}
	s, err := Open(context.Background(), Options{URL: os.Getenv(envHelperURL), TTL: time.Second,
		Password: Secret(os.Getenv(envHelperPwd)), ConnectTimeout: 5 * time.Second})
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(2)
	}
	if err := s.Publish(context.Background(), segment, descriptor(segment, 1), rpcOf(15001)); err != nil {
		fmt.Println("error:", err)
		os.Exit(2)
	}
	fmt.Println("ready")
	select {} // until killed
}

// startNode runs a helper node that publishes segment at url with a 1 s
// TTL and returns once it has; kill it with SIGKILL.
func startNode(t *testing.T, url, password, segment string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperNode$", "-test.v=false")
	cmd.Env = append(os.Environ(), envHelper+"="+segment, envHelperURL+"="+url, envHelperPwd+"="+password)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	line, _ := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) != "ready" {
		t.Fatalf("helper node: %q", line)
	}
	return cmd
}
