package connector_test

import (
	"context"
	"errors"
	"testing"

	"github.com/kvconnect/kvconnect/connector"
)

// TestPluginRingStats: a node's plugin tells who took its ring's batches
// (spinner, sleeper, standby), each batch once; a node with no ring to
// its plugin says it is not supported; asking for a transport the node
// does not run, one in-process, or a closed node fails with the error
// its doc names.
func TestPluginRingStats(t *testing.T) {
	ctx := context.Background()
	a, b := newNode(t), newNode(t)
	src, dst := alloc(t, a, 1<<20), alloc(t, b, 1<<20)
	peer, err := a.Open(ctx, b.SessionID())
	if err != nil {
		t.Fatal(err)
	}
	const n = 40
	for i := range n {
		op := connector.Op{Kind: connector.OpWrite, LocalRegion: src.ID(), LocalOffset: uint64(i) * 4096, RemoteRegion: dst.ID(), RemoteOffset: uint64(i) * 4096, Length: 4096}
		if err := a.Transfer(ctx, peer, op); err != nil {
			t.Fatal(err)
		}
	}
	var onRing bool
	var batches uint64
	for _, ts := range a.Status().Transports {
		if ts.Name == "tcp" && ts.Ring != nil {
			onRing, batches = true, ts.Ring.Batches
		}
	}
	st, err := a.PluginRingStats(ctx, "tcp")
	switch {
	case !onRing:
		// Rings off (KVCONNECT_PLUGIN_RINGS=0) or unsupported here.
		if !errors.Is(err, connector.ErrNotSupported) {
			t.Fatalf("PluginRingStats with no ring: %+v, %v; want ErrNotSupported", st, err)
		}
	case err != nil:
		t.Fatal(err)
	case batches < n || st.ClaimedBySpinner+st.ClaimedBySleeper+st.ClaimedByStandby != batches:
		t.Fatalf("the plugin took %+v for %d batches through the ring (%d transfers)", st, batches, n)
	default:
		t.Logf("the plugin took %+v for %d batches through the ring", st, batches)
	}
	if _, err := a.PluginRingStats(ctx, "rdma"); !errors.Is(err, connector.ErrInvalidArgument) {
		t.Errorf("PluginRingStats of a transport not up: %v, want ErrInvalidArgument", err)
	}
	in := newNode(t, connector.WithInProcess("tcp"))
	if _, err := in.PluginRingStats(ctx, "tcp"); !errors.Is(err, connector.ErrNotSupported) {
		t.Errorf("PluginRingStats in-process: %v, want ErrNotSupported", err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := b.PluginRingStats(ctx, "tcp"); !errors.Is(err, connector.ErrClosed) {
		t.Errorf("PluginRingStats after Close: %v, want ErrClosed", err)
	}
}
