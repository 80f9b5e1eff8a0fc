package host

import (
	"context"
	"errors"
	"strings"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/kvconnect/kvconnect/errdefs"
	"github.com/kvconnect/kvconnect/internal/pluginrpc"
	"github.com/kvconnect/kvconnect/internal/ring"
	"github.com/kvconnect/kvconnect/internal/testbin"
	"github.com/kvconnect/kvconnect/plugins"
)

// TestRingStatsOf: a plugin's ring counts its batches (and only the ones
// it carried: an empty batch goes over gRPC) and the host's waits for
// them; transports without a ring report none, and a nil *Plugin (a
// connector's in-process transport) neither panics nor reports.
func TestRingStatsOf(t *testing.T) {
	if _, ok := RingStatsOf((*Plugin)(nil)); ok {
		t.Error("a nil *Plugin reports ring counts")
	}
	if dp := DataPath((*Plugin)(nil)); dp != "" {
		t.Errorf("a nil *Plugin's data path %q", dp)
	}
	if _, ok := RingStatsOf(newBlocking()); ok {
		t.Error("a transport not served by this package reports ring counts")
	}
	if !ring.Supported {
		t.Skip("rings need Linux futexes")
	}
	t.Setenv(ring.EnvHostSpin, "") // the Chooser decides, as by default
	b := newBlocking()
	m := inMemoryRing(t, b)
	if st, ok := RingStatsOf(m); !ok || st.Batches != 0 || st.CaughtSpinning+st.Slept != 0 || !st.Spinning {
		t.Fatalf("a new ring: %+v (%v), want no batches and spinning (a Chooser's first way)", st, ok)
	}
	const n = 5
	for range n {
		res := make([]plugins.OpResult, 3)
		if err := m.Transfer(context.Background(), 1, ops(3), res); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Transfer(context.Background(), 1, nil, nil); err != nil {
		t.Fatal(err)
	}
	if st, ok := RingStatsOf(m); !ok || st.Batches != n {
		t.Fatalf("after %d batches through the ring and an empty one: %+v (%v)", n, st, ok)
	}
	// A batch the plugin holds: the host's spin runs out and it sleeps,
	// which counts, before the batch is let go. (Whether a wait spins or
	// sleeps otherwise depends on the scheduler: a completion already
	// there when the host first looks counts as neither.)
	done := make(chan error, 1)
	go func() { done <- m.Transfer(context.Background(), 7, ops(1), make([]plugins.OpResult, 1)) }()
	testbin.Eventually(t, "the host sleeping on a held batch", func() bool {
		st, _ := RingStatsOf(m)
		return st.Slept > 0
	})
	close(b.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if st, _ := RingStatsOf(m); st.Batches != n+1 {
		t.Fatalf("after the held batch: %+v, want %d batches", st, n+1)
	}
	// The plugin's side took every batch the host sent through the ring,
	// each once, whoever took it; the held one the sleeper or the
	// standby, since the host slept on it.
	ps, err := PluginRingStatsOf(t.Context(), m)
	if err != nil {
		t.Fatal(err)
	}
	if got := ps.ClaimedBySpinner + ps.ClaimedBySleeper + ps.ClaimedByStandby; got != n+1 {
		t.Errorf("the plugin counts %+v, %d batches in all, want %d", ps, got, n+1)
	}
	if _, err := PluginRingStatsOf(t.Context(), newBlocking()); !errors.Is(err, errdefs.ErrNotSupported) {
		t.Errorf("a transport not served by this package: %v, want ErrNotSupported", err)
	}
	if _, err := PluginRingStatsOf(t.Context(), (*Plugin)(nil)); !errors.Is(err, errdefs.ErrNotSupported) {
		t.Errorf("a nil *Plugin: %v, want ErrNotSupported", err)
	}

	t.Setenv(pluginrpc.EnvRings, "0")
	p, err := InMemory(newBlocking(), "ringtest", zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	if _, err := p.(*inMemory).Init(context.Background(), plugins.InitRequest{}); err != nil {
		t.Fatal(err)
	}
	if st, ok := RingStatsOf(p); ok {
		t.Fatalf("rings off, yet ring counts %+v", st)
	}
	if _, err := PluginRingStatsOf(t.Context(), p); !errors.Is(err, errdefs.ErrNotSupported) {
		t.Errorf("rings off: plugin ring counts %v, want ErrNotSupported", err)
	}
}

// TestOptionalCallsOfAnOldPlugin: a plugin with a ring but built before
// Stats and RingStats existed answers both UNIMPLEMENTED, which the host
// reports as ErrNotSupported (the metrics then show nothing for them),
// naming the call.
func TestOptionalCallsOfAnOldPlugin(t *testing.T) {
	if !ring.Supported {
		t.Skip("rings need Linux futexes")
	}
	h := &hostilePlugin{scribe: func(*ring.Shared, ring.Sub) {}, started: make(chan struct{}), stop: make(chan struct{})}
	c := rawPlugin(t, h, func(f *pluginrpc.FDReceiver) { h.fds = f })
	defer func() { close(h.stop); h.wg.Wait() }()
	if c.ring.Load() == nil {
		t.Fatal("no ring")
	}
	_, err := PluginRingStatsOf(t.Context(), &Plugin{grpcClient: c})
	if !errors.Is(err, errdefs.ErrNotSupported) || !strings.Contains(err.Error(), "built before the RingStats call") {
		t.Errorf("RingStats of an old plugin: %v, want ErrNotSupported naming the call", err)
	}
	_, err = c.Stats(t.Context())
	if !errors.Is(err, errdefs.ErrNotSupported) || !strings.Contains(err.Error(), "built before the Stats call") {
		t.Errorf("Stats of an old plugin: %v, want ErrNotSupported naming the call", err)
	}
}
