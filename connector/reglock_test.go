package connector_test

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/kvconnect/kvconnect/connector"
	"github.com/kvconnect/kvconnect/internal/testbin"
)

// TestRegionCallsBehindAWedgedPluginHonourTheirCtx: a Free without a
// deadline waits on a plugin that stopped answering (SIGSTOP here; a
// driver call in the field), holding the region lock. An Alloc behind it
// gives up when its own ctx ends instead of waiting as long as the plugin
// does; once the plugin runs again, both finish.
func TestRegionCallsBehindAWedgedPluginHonourTheirCtx(t *testing.T) {
	a := newNode(t)
	r := alloc(t, a, 1<<20)
	pid := a.Status().PluginPID
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			syscall.Kill(pid, syscall.SIGCONT)
		}
	}
	defer resume()
	freed := make(chan error, 1)
	go func() { freed <- r.Free(context.Background()) }()
	testbin.Eventually(t, "the Free holds the region lock", func() bool { return connector.RegionLockHeld(a) })
	allocated := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		_, err := a.Alloc(ctx, 4096)
		allocated <- err
	}()
	select {
	case err := <-allocated:
		if !errors.Is(err, connector.ErrTimeout) {
			t.Errorf("Alloc behind a wedged plugin: %v, want ErrTimeout", err)
		}
	case <-time.After(time.Minute):
		resume()
		t.Fatal("Alloc with a 300ms ctx still waiting a minute later, behind a Free on a wedged plugin")
	}
	resume()
	if err := <-freed; err != nil {
		t.Errorf("the Free once the plugin runs again: %v", err)
	}
}
