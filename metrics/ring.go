package metrics

import (
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

	ringDescs = []*prometheus.Desc{ringBatchesDesc, ringWaitsDesc, ringSpinningDesc}
)

// ringTracker keeps what each plugin instance's ring last showed and the
// sums of the instances gone (crashed plugins, since restarted), per
// transport, so the ring's counters never go back.
type ringTracker struct {
	mu   sync.Mutex
	gone map[string]RingState // per transport; Spinning unused
	last map[any]ringLast     // per instance
}

type ringLast struct {
	transport string
	st        RingState
}

func (s *RingState) add(o RingState) {
	s.Batches += o.Batches
	s.CaughtSpinning += o.CaughtSpinning
	s.Slept += o.Slept
}

func (t *ringTracker) collect(ch chan<- prometheus.Metric, transports []TransportState) {
	t.mu.Lock()
	if t.gone == nil {
		t.gone, t.last = map[string]RingState{}, map[any]ringLast{}
	}
	for _, ts := range transports {
		if ts.Ring != nil {
			prev := t.last[ts.Instance].st
			st := *ts.Ring
			// Counters of one instance never go back, even when
			// concurrent scrapes read them out of order.
			st.Batches, st.CaughtSpinning, st.Slept = max(st.Batches, prev.Batches), max(st.CaughtSpinning, prev.CaughtSpinning), max(st.Slept, prev.Slept)
			t.last[ts.Instance] = ringLast{transport: ts.Name, st: st}
		}
	}
	for inst, l := range t.last {
		if !transportsHave(transports, inst) {
			g := t.gone[l.transport]
			g.add(l.st)
			t.gone[l.transport] = g
			delete(t.last, inst)
		}
	}
	totals := map[string]RingState{}
	for name, g := range t.gone {
		totals[name] = g
	}
	spinning := map[string]bool{}
	for _, l := range t.last {
		tot := totals[l.transport]
		tot.add(l.st)
		totals[l.transport] = tot
	}
	t.mu.Unlock()

	for _, ts := range transports {
		if ts.Ring != nil {
			spinning[ts.Name] = ts.Ring.Spinning
		}
	}
	for name, tot := range totals {
		ch <- prometheus.MustNewConstMetric(ringBatchesDesc, prometheus.CounterValue, float64(tot.Batches), name)
		ch <- prometheus.MustNewConstMetric(ringWaitsDesc, prometheus.CounterValue, float64(tot.CaughtSpinning), name, "caught_spinning")
		ch <- prometheus.MustNewConstMetric(ringWaitsDesc, prometheus.CounterValue, float64(tot.Slept), name, "slept")
	}
	for name, s := range spinning {
		ch <- prometheus.MustNewConstMetric(ringSpinningDesc, prometheus.GaugeValue, b2f(s), name)
	}
}
