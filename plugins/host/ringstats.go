package host

import "github.com/kvconnect/kvconnect/plugins"

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
