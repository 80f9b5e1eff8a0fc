package connector_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/kvconnect/kvconnect/connector"
	"github.com/kvconnect/kvconnect/metadata"
)

// TestShutdownHonoursItsDeadlineWithAWedgedPlugin: Shutdown of a node
// whose plugin answers nothing (SIGSTOP, as a plugin wedged in a driver
// call) ends by its ctx's deadline, not by the bound on closing one
// transport (made 10 minutes here so that the two cannot be confused),
// and the plugin process is killed and reaped.
func TestShutdownHonoursItsDeadlineWithAWedgedPlugin(t *testing.T) {
	defer connector.SetCloseTimeout(10 * time.Minute)()
	c, err := connector.New(context.Background(), connector.Config{Protocol: "tcp", PluginDir: pluginDir(t)},
		connector.WithLogger(zaptest.NewLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	pid := c.Status().PluginPID
	if pid == 0 {
		t.Fatal("no plugin process")
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(pid, syscall.SIGCONT)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Shutdown(ctx) }()
	select {
	case err := <-done:
		if !errors.Is(err, connector.ErrTimeout) {
			t.Errorf("Shutdown of a node whose plugin answers nothing: %v, want ErrTimeout", err)
		}
	case <-time.After(2 * time.Minute):
		syscall.Kill(pid, syscall.SIGKILL)
		t.Fatal("Shutdown with a 1 s deadline still running after 2 minutes: it waits for the wedged plugin")
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("the wedged plugin process %d is still there after Shutdown (kill -0: %v)", pid, err)
	}
}

// TestShutdownCutsAPublishInFlight: a descriptor publish to a metadata
// service that does not answer (its PUT hangs; connect_timeout made 10
// minutes) does not hold Shutdown: closing ends the publish, and
// Shutdown still deletes the node's keys.
func TestShutdownCutsAPublishInFlight(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := metadata.NewServer(metadata.ServerOptions{Path: "/metadata"})
	var hang atomic.Bool
	hanging := make(chan struct{})
	var once sync.Once
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hang.Load() && r.Method == http.MethodPut {
			once.Do(func() { close(hanging) })
			<-r.Context().Done() // until the client gives up
			return
		}
		srv.ServeHTTP(w, r)
	})}
	go hs.Serve(ln)
	defer hs.Close()
	ctx := context.Background()
	c, err := connector.New(ctx, connector.Config{Protocol: "tcp", PluginDir: pluginDir(t), ConnectTimeout: 10 * time.Minute,
		Metadata: "http://" + ln.Addr().String() + "/metadata"}, connector.WithLogger(zaptest.NewLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	if n := srv.Stats().Entries; n == 0 {
		t.Fatal("the node published nothing")
	}
	hang.Store(true)
	if _, err := c.Alloc(ctx, 4096); err != nil { // the descriptor changes: a publish, which hangs
		t.Fatal(err)
	}
	<-hanging
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Shutdown(sctx) }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Shutdown with a publish in flight: %v", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("Shutdown still running after 2 minutes: it waits for the hanging publish")
	}
	if n := srv.Stats().Entries; n != 0 {
		t.Errorf("%d keys left in the metadata service after Shutdown, want 0", n)
	}
}
