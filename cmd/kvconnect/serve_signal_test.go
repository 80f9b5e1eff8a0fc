package main

import (
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/kvconnect/kvconnect/metadata"
)

// TestServeSecondSignalForcesExit: a shutdown that hangs (here on a
// metadata service that stopped answering while serve removes its keys)
// ends at a second SIGINT, however long the hang. Before, signals after
// the first were swallowed until the shutdown gave up by itself.
func TestServeSecondSignalForcesExit(t *testing.T) {
	var hang atomic.Bool
	release := make(chan struct{})
	defer close(release)
	meta := metadata.NewServer(metadata.ServerOptions{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hang.Load() {
			<-release // a service that accepts and never answers
			return
		}
		meta.ServeHTTP(w, r)
	})}
	go hs.Serve(ln)
	defer hs.Close()

	// connect_timeout bounds each metadata request, so the hang outlasts
	// this test's bound on the exit by far.
	cmd := exec.Command(kvconnectBin(t), "serve", "--log-level", "info", "--log-format", "json",
		"--metadata", "http://"+ln.Addr().String()+"/metadata", "--connect-timeout", "5m")
	cmd.Env = append(os.Environ(), "KVCONNECT_PLUGIN_DIR=")
	var out, errOut syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("no %s within 60 s:\n%s", what, errOut.String())
			}
			time.Sleep(10 * time.Millisecond) // polling its output
		}
	}
	waitFor("status line", func() bool { return strings.Contains(out.String(), `"session"`) })
	hang.Store(true)
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	waitFor("shutdown line", func() bool { return strings.Contains(errOut.String(), "shutting down") })
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("serve exited 0 after a second SIGINT cut its shutdown short")
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("serve still running 30 s after a second SIGINT (its shutdown hangs on the metadata service):\n%s", errOut.String())
	}
}
