package host

import (
	"context"
	"fmt"

	"github.com/kvconnect/kvconnect/errdefs"
	"github.com/kvconnect/kvconnect/internal/pluginrpc/proto"
	"github.com/kvconnect/kvconnect/plugins"
)

// RingStats is what the host side of a plugin's shared-memory ring has
// counted since the ring opened (docs/OBSERVABILITY.md shows it as
// metrics).
type RingStats struct {
	// Batches went to the plugin through the ring.
	Batches uint64 `json:"batches"`
	// CaughtSpinning counts the host's spins for completions that saw
	// one come; Slept its sleeps on the ring's futex instead (each
	// bounded by ringSleep, so a wait for a long batch sleeps several
	// times).
	CaughtSpinning uint64 `json:"caught_spinning"`
	Slept          uint64 `json:"slept"`
	// Spinning says the host's waits spin: the way its spin.Chooser
	// keeps (not the one it may be trying for an epoch), or the fixed
	// budget of KVCONNECT_RING_HOST_SPIN.
	Spinning bool `json:"spinning"`
}

// RingStatsOf returns what t's ring counted, and false when t has no
// ring: an in-process transport, or a plugin whose ring never opened
// (rings off or unsupported). A ring that stopped keeps its counts.
func RingStatsOf(t plugins.Transport) (RingStats, bool) {
	c := clientOf(t)
	if c == nil {
		return RingStats{}, false
	}
	rc := c.ring.Load()
	if rc == nil {
		return RingStats{}, false
	}
	return RingStats{
		Batches:        uint64(rc.stats.batches.Load()),
		CaughtSpinning: uint64(rc.stats.caught.Load()),
		Slept:          uint64(rc.stats.slept.Load()),
		Spinning:       hostSpins(rc),
	}, true
}

func hostSpins(rc *ringClient) bool {
	switch {
	case rc.rtt.Fixed != 0:
		return rc.rtt.Fixed > 0
	case rc.rtt.Choose != nil:
		return rc.rtt.Choose.Choice().Spinning
	}
	return rc.rtt.Max > 0
}

// PluginRingStats is what the plugin's side of its ring counted since
// the ring opened: the batches it took from the submission queue, by who
// took them (docs/DATAPATH.md, "Waking up"). A small-op workload whose
// batches the spinner takes runs without wake-ups on the plugin's side;
// one whose batches the sleeper takes pays a wake-up per batch.
type PluginRingStats struct {
	// ClaimedBySpinner: taken by a goroutine spinning for the host's next
	// submission after a completion.
	ClaimedBySpinner uint64 `json:"claimed_by_spinner"`
	// ClaimedBySleeper: taken by the sleeper, which the host woke.
	ClaimedBySleeper uint64 `json:"claimed_by_sleeper"`
	// ClaimedByStandby: taken by the standby, which the host woke while
	// the sleeper ran a batch itself.
	ClaimedByStandby uint64 `json:"claimed_by_standby"`
}

// PluginRingStatsOf asks t's plugin what its side of the ring counted.
// It fails with an error wrapping errdefs.ErrNotSupported when t has no
// ring (an in-process transport, rings off, a ring that never opened) or
// its plugin was built before the call existed; otherwise its errors are
// the plugin calls' (ErrTransportCrashed, ErrTimeout, ...).
func PluginRingStatsOf(ctx context.Context, t plugins.Transport) (PluginRingStats, error) {
	c := clientOf(t)
	if c == nil || c.ring.Load() == nil {
		return PluginRingStats{}, fmt.Errorf("ring stats: the transport has no plugin ring: %w", errdefs.ErrNotSupported)
	}
	r, err := c.rpc.RingStats(ctx, &proto.RingStatsRequest{})
	if err != nil {
		return PluginRingStats{}, c.optionalCallError(ctx, "ring stats", "RingStats", err)
	}
	return PluginRingStats{ClaimedBySpinner: r.GetClaimedBySpinner(), ClaimedBySleeper: r.GetClaimedBySleeper(), ClaimedByStandby: r.GetClaimedByStandby()}, nil
}
