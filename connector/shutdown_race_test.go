package connector_test

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/kvconnect/kvconnect/connector"
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
