package metrics

import (
	"context"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// RingState is what the host side of a transport plugin's shared-memory
// ring counted (docs/DATAPATH.md): how many batches went through it, and
// how the host waited for their completions. Each plugin instance counts
// from zero; the metrics keep the sums of instances that are gone.
type RingState struct {
	// Batches went to the plugin through the ring. The others (larger
	// than its arena, or sent after it broke) went over gRPC.
	Batches uint64
	// CaughtSpinning counts the host's spins for completions that saw
	// one come; Slept its sleeps on the ring's futex instead (each
	// bounded, so a wait for a long batch may sleep several times; a
	// sleep may end with several batches complete; a completion already
	// there when the host first looks counts as neither).
	CaughtSpinning, Slept uint64
	// Spinning says the host's waits spin now: its spin.Chooser found
	// spinning faster than sleeping on this machine and load. False:
	// they sleep at once.
	Spinning bool
}

// PluginRingState is what the plugin's side of its ring counted: the
// batches it took from the submission queue, by who took them (the
// spinner after a completion, or the sleeper or standby the host woke).
type PluginRingState struct {
	ClaimedBySpinner, ClaimedBySleeper, ClaimedByStandby uint64
}

// ringCounts is one instance's ring, both sides.
type ringCounts struct {
	host   RingState
	plugin PluginRingState
	// pluginReported: the plugin answered for its side at least once.
	pluginReported bool
}

var (
	ringBatchesDesc = desc("kvconnect_ring_batches_total",
		"Batches the host sent to the transport's plugin through its shared-memory ring (the rest went over gRPC), by transport; across plugin restarts.",
		"transport")
	ringWaitsDesc = desc("kvconnect_ring_host_waits_total",
		"The host's waits for completions from the plugin's ring, by transport and outcome: caught_spinning (a spin saw a completion come) or slept (a sleep on the ring's futex: the plugin wakes the host, or a long batch's wait sleeps again); across plugin restarts.",
		"transport", "outcome")
	ringSpinningDesc = desc("kvconnect_ring_host_spinning",
		"1 while the host spins waiting for the plugin ring's completions (it measured spinning faster on this machine and load), 0 while it sleeps at once; by transport, for plugins with a ring.",
		"transport")
	ringClaimsDesc = desc("kvconnect_ring_plugin_claims_total",
		"Batches the plugin took from its ring, by transport and who took them: spinner (a goroutine spinning for the next submission after a completion: no wake-up), sleeper or standby (woken by the host); across plugin restarts.",
		"transport", "by")

	ringDescs = []*prometheus.Desc{ringBatchesDesc, ringWaitsDesc, ringSpinningDesc, ringClaimsDesc}
)

// ringTracker keeps what each plugin instance's ring last showed and the
// sums of the instances gone (crashed plugins, since restarted), per
// transport, so the ring's counters never go back.
type ringTracker struct {
	mu   sync.Mutex
	gone map[string]ringCounts // per transport; Spinning unused
	last map[any]ringLast      // per instance
}

type ringLast struct {
	transport string
	c         ringCounts
}

func (c *ringCounts) add(o ringCounts) {
	c.host.Batches += o.host.Batches
	c.host.CaughtSpinning += o.host.CaughtSpinning
	c.host.Slept += o.host.Slept
	c.plugin.ClaimedBySpinner += o.plugin.ClaimedBySpinner
	c.plugin.ClaimedBySleeper += o.plugin.ClaimedBySleeper
	c.plugin.ClaimedByStandby += o.plugin.ClaimedByStandby
	c.pluginReported = c.pluginReported || o.pluginReported
}

// raise keeps, counter by counter, the larger of c and o: counters of
// one instance never go back, even when concurrent scrapes read them out
// of order.
func (c *ringCounts) raise(o ringCounts) {
	c.host.Batches = max(c.host.Batches, o.host.Batches)
	c.host.CaughtSpinning = max(c.host.CaughtSpinning, o.host.CaughtSpinning)
	c.host.Slept = max(c.host.Slept, o.host.Slept)
	c.plugin.ClaimedBySpinner = max(c.plugin.ClaimedBySpinner, o.plugin.ClaimedBySpinner)
	c.plugin.ClaimedBySleeper = max(c.plugin.ClaimedBySleeper, o.plugin.ClaimedBySleeper)
	c.plugin.ClaimedByStandby = max(c.plugin.ClaimedByStandby, o.plugin.ClaimedByStandby)
	c.pluginReported = c.pluginReported || o.pluginReported
}

func (t *ringTracker) collect(ch chan<- prometheus.Metric, transports []TransportState) {
	// The plugins' sides first, concurrently, each bounded (askAll).
	plugin := askAll(transports, func(ctx context.Context, ts TransportState) (PluginRingState, bool) {
		if ts.Ring == nil || ts.PluginRing == nil {
			return PluginRingState{}, false
		}
		st, err := ts.PluginRing(ctx)
		return st, err == nil // not supported, or no answer: the last one stands
	})
	t.mu.Lock()
	if t.gone == nil {
		t.gone, t.last = map[string]ringCounts{}, map[any]ringLast{}
	}
	for i, ts := range transports {
		if ts.Ring == nil {
			continue
		}
		c := t.last[ts.Instance].c
		now := ringCounts{host: *ts.Ring}
		if p, ok := plugin[i]; ok {
			now.plugin, now.pluginReported = p, true
		}
		c.raise(now)
		c.host.Spinning = ts.Ring.Spinning
		t.last[ts.Instance] = ringLast{transport: ts.Name, c: c}
	}
	for inst, l := range t.last {
		if !transportsHave(transports, inst) {
			g := t.gone[l.transport]
			g.add(l.c)
			t.gone[l.transport] = g
			delete(t.last, inst)
		}
	}
	totals := map[string]ringCounts{}
	for name, g := range t.gone {
		totals[name] = g
	}
	for _, l := range t.last {
		tot := totals[l.transport]
		tot.add(l.c)
		totals[l.transport] = tot
	}
	t.mu.Unlock()

	spinning := map[string]bool{}
	for _, ts := range transports {
		if ts.Ring != nil {
			spinning[ts.Name] = ts.Ring.Spinning
		}
	}
	for name, tot := range totals {
		ch <- prometheus.MustNewConstMetric(ringBatchesDesc, prometheus.CounterValue, float64(tot.host.Batches), name)
		ch <- prometheus.MustNewConstMetric(ringWaitsDesc, prometheus.CounterValue, float64(tot.host.CaughtSpinning), name, "caught_spinning")
		ch <- prometheus.MustNewConstMetric(ringWaitsDesc, prometheus.CounterValue, float64(tot.host.Slept), name, "slept")
		if tot.pluginReported {
			ch <- prometheus.MustNewConstMetric(ringClaimsDesc, prometheus.CounterValue, float64(tot.plugin.ClaimedBySpinner), name, "spinner")
			ch <- prometheus.MustNewConstMetric(ringClaimsDesc, prometheus.CounterValue, float64(tot.plugin.ClaimedBySleeper), name, "sleeper")
			ch <- prometheus.MustNewConstMetric(ringClaimsDesc, prometheus.CounterValue, float64(tot.plugin.ClaimedByStandby), name, "standby")
		}
	}
	for name, s := range spinning {
		ch <- prometheus.MustNewConstMetric(ringSpinningDesc, prometheus.GaugeValue, b2f(s), name)
	}
}
