//go:build linux && cgo

package connector_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/kvconnect/kvconnect/connector"
	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/transports"
	"github.com/kvconnect/kvconnect/transports/ucx"
)

// heldUCX is the ucx transport whose DeregisterRegion, once armed, waits
// for proceed, and whose Close waits for closeOK (signalling closing).
type heldUCX struct {
	plugins.Transport
	armed             bool
	entered, proceed  chan struct{}
	closing, closeOK  chan struct{}
	enterOnce, closeO sync.Once
}

func (h *heldUCX) DeregisterRegion(ctx context.Context, id plugins.RegionID) error {
	if h.armed {
		h.enterOnce.Do(func() { close(h.entered) })
		<-h.proceed
	}
	return h.Transport.DeregisterRegion(ctx, id)
}

func (h *heldUCX) Close(ctx context.Context) error {
	h.closeO.Do(func() { close(h.closing) })
	<-h.closeOK
	return h.Transport.Close(ctx)
}

// TestFreeOvertakenByShutdownKeepsTheMemoryForShutdown: a Free that began
// before Shutdown and reaches a transport after Shutdown began must not
// release the region while that transport (in-process here) is still up
// and may run ops on it: it fails with ErrClosed and leaves the region to
// Shutdown, which unmaps it once the transports are closed.
func TestFreeOvertakenByShutdownKeepsTheMemoryForShutdown(t *testing.T) {
	ctx := context.Background()
	h := &heldUCX{Transport: ucx.New(), entered: make(chan struct{}), proceed: make(chan struct{}),
		closing: make(chan struct{}), closeOK: make(chan struct{})}
	cat := transports.Builtin().WithFactory("ucx", func() plugins.Transport { return h })
	c, err := connector.New(ctx, connector.Config{Protocol: "ucx", Transports: map[string]map[string]any{"ucx": {"tls": "tcp"}}},
		connector.WithCatalog(cat), connector.WithInProcess("ucx", "tcp"), connector.WithLogger(zaptest.NewLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	if ts := c.Status().Transports; len(ts) != 2 {
		t.Fatalf("transports up %+v, want ucx and tcp (kept beside it)", ts)
	}
	r, err := c.Alloc(ctx, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if !mapped(t, "slab-1") {
		t.Fatal("the region's slab is not mapped after Alloc")
	}
	h.armed = true
	freed := make(chan error, 1)
	go func() { freed <- r.Free(ctx) }()
	<-h.entered // the Free is under way, on ucx
	shut := make(chan error, 1)
	go func() { shut <- c.Shutdown(ctx) }()
	<-h.closing // Shutdown began; tcp is still up
	close(h.proceed)
	if err := <-freed; !errors.Is(err, connector.ErrClosed) {
		t.Errorf("the Free overtaken by Shutdown: %v, want ErrClosed", err)
	}
	if !mapped(t, "slab-1") {
		t.Error("the Free released the region while Shutdown had not closed tcp (in-process, it may still run ops on it)")
	}
	close(h.closeOK)
	if err := <-shut; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if mapped(t, "slab-1") {
		t.Error("after Shutdown the region's slab is still mapped")
	}
}
