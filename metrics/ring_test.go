package metrics_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/kvconnect/kvconnect/errdefs"
	"github.com/kvconnect/kvconnect/metrics"
	"github.com/kvconnect/kvconnect/metrics/metricstest"
)

// TestRingCounters: a plugin's ring counts show per transport, an
// instance's counts stay after it is replaced (a plugin restart) and the
// new one's add to them, a count read lower later is not believed, the
// spinning gauge follows the instance up now, and a transport without a
// ring shows no ring series.
func TestRingCounters(t *testing.T) {
	n := newTestNode(t, metrics.Options{})
	batches := func(f metricstest.Families) float64 {
		return f.Value("kvconnect_ring_batches_total", "transport", "tcp")
	}
	first, second := new(int), new(int) // instances: any comparable value
	n.setTransports(
		metrics.TransportState{Name: "tcp", Plugin: true, PluginRunning: true, Healthy: true, Instance: first,
			Ring: &metrics.RingState{Batches: 100, CaughtSpinning: 90, Slept: 12, Spinning: true}},
		metrics.TransportState{Name: "ucx", Healthy: true, Instance: "ucx"})
	f := n.gather(t)
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"kvconnect_ring_batches_total", []string{"transport", "tcp"}, 100},
		{"kvconnect_ring_host_waits_total", []string{"transport", "tcp", "outcome", "caught_spinning"}, 90},
		{"kvconnect_ring_host_waits_total", []string{"transport", "tcp", "outcome", "slept"}, 12},
		{"kvconnect_ring_host_spinning", []string{"transport", "tcp"}, 1},
	} {
		if got, ok := f.Get(c.name, c.labels...); !ok || got != c.want {
			t.Errorf("%s%v = %v (found %v), want %v", c.name, c.labels, got, ok, c.want)
		}
	}
	for _, name := range []string{"kvconnect_ring_batches_total", "kvconnect_ring_host_spinning"} {
		if _, ok := f.Get(name, "transport", "ucx"); ok {
			t.Errorf("%s shows for ucx, which has no ring", name)
		}
	}

	// Concurrent scrapes may read an instance's counts out of order.
	n.setTransports(metrics.TransportState{Name: "tcp", Plugin: true, PluginRunning: true, Healthy: true, Instance: first,
		Ring: &metrics.RingState{Batches: 80, CaughtSpinning: 70, Slept: 10, Spinning: true}})
	if got := batches(n.gather(t)); got != 100 {
		t.Fatalf("batches %v after a lower read, want 100", got)
	}

	// The plugin restarted: a new instance with a new ring, now sleeping.
	n.setTransports(metrics.TransportState{Name: "tcp", Plugin: true, PluginRunning: true, Healthy: true, Restarts: 1, Instance: second,
		Ring: &metrics.RingState{Batches: 5, CaughtSpinning: 1, Slept: 4}})
	f = n.gather(t)
	if got := batches(f); got != 105 {
		t.Errorf("batches %v after the restart, want 100 (gone) + 5 (new)", got)
	}
	if got := f.Value("kvconnect_ring_host_waits_total", "transport", "tcp", "outcome", "slept"); got != 16 {
		t.Errorf("slept %v after the restart, want 12 + 4", got)
	}
	if got, ok := f.Get("kvconnect_ring_host_spinning", "transport", "tcp"); !ok || got != 0 {
		t.Errorf("spinning %v (found %v), want 0: the new instance sleeps", got, ok)
	}

	// A plugin down (crashed, not restarted yet) has no ring: the sums stay,
	// the gauge goes.
	n.setTransports(metrics.TransportState{Name: "tcp", Plugin: true, Instance: new(int)})
	f = n.gather(t)
	if got := batches(f); got != 105 {
		t.Errorf("batches %v while the plugin is down, want 105", got)
	}
	if _, ok := f.Get("kvconnect_ring_host_spinning", "transport", "tcp"); ok {
		t.Error("the spinning gauge shows for a transport without a ring")
	}
}

// TestRingPluginClaims: the plugin's side of a ring shows by who took
// each batch, asked at scrape time; a lower or failed answer leaves the
// last one standing, a restarted plugin's counts add to the gone one's,
// a plugin that does not answer the call shows no series, and one that
// hangs does not hold the scrape past its bound.
func TestRingPluginClaims(t *testing.T) {
	n := newTestNode(t, metrics.Options{})
	answer := func(st metrics.PluginRingState, err error) func(context.Context) (metrics.PluginRingState, error) {
		return func(context.Context) (metrics.PluginRingState, error) { return st, err }
	}
	state := func(inst any, ring func(context.Context) (metrics.PluginRingState, error)) metrics.TransportState {
		return metrics.TransportState{Name: "tcp", Plugin: true, PluginRunning: true, Healthy: true, Instance: inst,
			Ring: &metrics.RingState{Batches: 14}, PluginRing: ring}
	}
	claims := func(f metricstest.Families) [3]float64 {
		var out [3]float64
		for i, by := range []string{"spinner", "sleeper", "standby"} {
			out[i] = f.Value("kvconnect_ring_plugin_claims_total", "transport", "tcp", "by", by)
		}
		return out
	}
	first, second := new(int), new(int)
	for _, step := range []struct {
		name string
		st   metrics.TransportState
		want [3]float64
	}{
		{"first answer", state(first, answer(metrics.PluginRingState{ClaimedBySpinner: 10, ClaimedBySleeper: 3, ClaimedByStandby: 1}, nil)), [3]float64{10, 3, 1}},
		{"a lower answer", state(first, answer(metrics.PluginRingState{ClaimedBySpinner: 5, ClaimedBySleeper: 1}, nil)), [3]float64{10, 3, 1}},
		{"an error", state(first, answer(metrics.PluginRingState{}, errdefs.ErrTransportCrashed)), [3]float64{10, 3, 1}},
		{"a restarted plugin", state(second, answer(metrics.PluginRingState{ClaimedBySpinner: 2, ClaimedBySleeper: 1}, nil)), [3]float64{12, 4, 1}},
	} {
		n.setTransports(step.st)
		if got := claims(n.gather(t)); got != step.want {
			t.Errorf("%s: claims by spinner, sleeper, standby %v, want %v", step.name, got, step.want)
		}
	}

	// A plugin that predates the call: host series, no claims.
	m := newTestNode(t, metrics.Options{})
	m.setTransports(state(first, answer(metrics.PluginRingState{}, fmt.Errorf("ring stats: %w", errdefs.ErrNotSupported))))
	f := m.gather(t)
	if _, ok := f.Get("kvconnect_ring_batches_total", "transport", "tcp"); !ok {
		t.Error("no kvconnect_ring_batches_total for a plugin with a ring")
	}
	if _, ok := f.Get("kvconnect_ring_plugin_claims_total", "transport", "tcp", "by", "spinner"); ok {
		t.Error("claims show for a plugin that never answered for its side")
	}

	// A plugin that hangs: the scrape ends (each call's context ends at
	// StatsTimeout) and shows the host's side.
	h := newTestNode(t, metrics.Options{})
	called := make(chan struct{})
	h.setTransports(state(first, func(ctx context.Context) (metrics.PluginRingState, error) {
		close(called)
		<-ctx.Done()
		return metrics.PluginRingState{ClaimedBySpinner: 99}, ctx.Err()
	}))
	f = h.gather(t)
	<-called
	if got := f.Value("kvconnect_ring_batches_total", "transport", "tcp"); got != 14 {
		t.Errorf("batches %v beside a hung plugin, want 14", got)
	}
	if _, ok := f.Get("kvconnect_ring_plugin_claims_total", "transport", "tcp", "by", "spinner"); ok {
		t.Error("claims show from a call that timed out")
	}
}
