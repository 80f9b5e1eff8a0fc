package metadata

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/kvconnect/kvconnect/internal/testbin"
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

// hang is what a bounded call may take beyond its timeout before the test
// calls it a hang: a loaded machine runs late, never early, so bounds
// are timeouts plus hang, and lower bounds are exact.
const hang = 10 * time.Second

// blackhole returns a loopback address whose connection attempts time
// out: a listener that never accepts, with its accept queue full, so the
// kernel drops new SYNs (no address outside this machine is dialed).
func blackhole(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
	// Fill the accept queue until a connection attempt times out.
	for i := 0; ; i++ {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			break
		}
		t.Cleanup(func() { c.Close() })
		if i == 64 {
			t.Fatal("the listener's accept queue never filled")
		}
	}
	return addr
}

// noLeaks fails the test if goroutines started during it outlive it:
// call it first; it checks when the test's cleanups have run.
func noLeaks(t *testing.T) {
	t.Helper()
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(testbin.WaitLimit)
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
	s, err := Open(context.Background(), Options{URL: os.Getenv(envHelperURL), TTL: helperTTL,
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
	// Until killed: a line for each renewal of the keys, so the test
	// sees them renewed instead of sleeping for it.
	for seen := s.Status().Renewals; ; time.Sleep(5 * time.Millisecond) {
		if n := s.Status().Renewals; n > seen {
			seen = n
			fmt.Println("renewed")
		}
	}
}

// helperTTL is the helper node's TTL: short, so its keys expire soon
// after it is killed, and three renewals long (one every TTL/3), so a
// loaded machine delaying one renewal does not expire them while it
// lives.
const helperTTL = 3 * time.Second

// helperNode is a running helper node.
type helperNode struct {
	*exec.Cmd
	out *bufio.Reader
}

// renewed waits until the node has renewed its keys n more times.
func (h *helperNode) renewed(t *testing.T, n int) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		for range n {
			line, err := h.out.ReadString('\n')
			if err != nil || strings.TrimSpace(line) != "renewed" {
				done <- fmt.Errorf("helper node: %q %v", line, err)
				return
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(testbin.WaitLimit):
		t.Fatalf("the helper node did not renew its keys %d times within %v", n, testbin.WaitLimit)
	}
}

// startNode runs a helper node that publishes segment at url with TTL
// helperTTL and returns once it has; kill it with SIGKILL.
func startNode(t *testing.T, url, password, segment string) *helperNode {
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
	r := bufio.NewReader(out)
	line, _ := r.ReadString('\n')
	if strings.TrimSpace(line) != "ready" {
		t.Fatalf("helper node: %q", line)
	}
	return &helperNode{Cmd: cmd, out: r}
}
