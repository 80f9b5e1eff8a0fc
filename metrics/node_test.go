package metrics_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/kvconnect/kvconnect/errdefs"
	"github.com/kvconnect/kvconnect/metrics"
	"github.com/kvconnect/kvconnect/metrics/metricstest"
	"github.com/kvconnect/kvconnect/plugins"
)

// reporter is a transport instance's served counts, as a StatsReporter.
type reporter struct {
	mu    sync.Mutex
	st    plugins.ServedStats
	err   error
	calls atomic.Int64
}

func (r *reporter) Stats(context.Context) (plugins.ServedStats, error) {
	r.calls.Add(1)
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.st, r.err
}

func (r *reporter) set(bytes uint64, err error) {
	r.mu.Lock()
	r.st = plugins.ServedStats{Ops: []plugins.ServedOps{{Op: plugins.OpWrite, Result: plugins.ResultCompleted, Ops: bytes / 100, Bytes: bytes}}}
	r.err = err
	r.mu.Unlock()
}

// node is a Node over a state the test changes, registered on a registry
// of its own.
type node struct {
	*metrics.Node
	reg  *prometheus.Registry
	mu   sync.Mutex
	snap metrics.Snapshot
}

func newTestNode(t *testing.T, opts metrics.Options) *node {
	n := &node{reg: prometheus.NewRegistry()}
	n.Node = metrics.NewNode(metrics.SourceFunc(func() metrics.Snapshot {
		n.mu.Lock()
		defer n.mu.Unlock()
		return n.snap
	}), opts)
	if err := n.Register(n.reg); err != nil {
		t.Fatal(err)
	}
	return n
}

func (n *node) setTransports(ts ...metrics.TransportState) {
	n.mu.Lock()
	n.snap.Transports = ts
	n.mu.Unlock()
}

// gather renders the registry in the text format and parses it back, as
// a scrape would.
func (n *node) gather(t *testing.T) metricstest.Families {
	t.Helper()
	fams, err := n.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, f := range fams {
		if _, err := expfmt.MetricFamilyToText(&b, f); err != nil {
			t.Fatal(err)
		}
	}
	out, err := metricstest.Parse(strings.NewReader(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func served(f metricstest.Families) float64 {
	return f.Value("kvconnect_served_bytes_total", "transport", "tcp", "op", "write", "result", "completed")
}

// TestServedCountsSurviveRestarts: what a transport instance reported
// stays counted after it is replaced (a plugin restart), a new instance's
// counts add to it, an instance that does not answer shows its last
// report, and nothing goes down.
func TestServedCountsSurviveRestarts(t *testing.T) {
	n := newTestNode(t, metrics.Options{})
	first := &reporter{}
	first.set(1000, nil)
	n.setTransports(metrics.TransportState{Name: "tcp", Plugin: true, PluginRunning: true, Healthy: true, Instance: first, Stats: first})
	if got := served(n.gather(t)); got != 1000 {
		t.Fatalf("served %v, want 1000", got)
	}
	first.set(1500, errors.New("the plugin process exited")) // crashed: answers nothing
	n.setTransports(metrics.TransportState{Name: "tcp", Plugin: true, Instance: first, Stats: first})
	f := n.gather(t)
	if got := served(f); got != 1000 {
		t.Fatalf("served %v while the instance does not answer, want its last report 1000", got)
	}
	if v := f.Value("kvconnect_plugin_up", "transport", "tcp"); v != 0 {
		t.Errorf("plugin_up %v for a crashed plugin", v)
	}
	second := &reporter{}
	second.set(300, nil)
	n.setTransports(metrics.TransportState{Name: "tcp", Plugin: true, PluginRunning: true, Healthy: true, Restarts: 1, Instance: second, Stats: second})
	f = n.gather(t)
	if got := served(f); got != 1300 {
		t.Fatalf("served %v after the restart, want 1000 (gone) + 300 (new)", got)
	}
	if v := f.Value("kvconnect_plugin_restarts_total", "transport", "tcp"); v != 1 {
		t.Errorf("restarts %v", v)
	}
	second.set(200, nil) // a count going down is not believed
	if got := served(n.gather(t)); got != 1300 {
		t.Fatalf("served %v after the instance reported less, want 1300", got)
	}
}

// TestServedStatsBounded: a transport's report cannot add label values
// beyond the known ones, one that reports nothing (ErrNotSupported) shows
// no served series, and a slow one does not hold the scrape past
// StatsTimeout.
func TestServedStatsBounded(t *testing.T) {
	n := newTestNode(t, metrics.Options{})
	odd := &reporter{}
	odd.st = plugins.ServedStats{
		Ops:      []plugins.ServedOps{{Op: 9, Result: plugins.ResultCompleted, Ops: 1, Bytes: 1}, {Op: plugins.OpRead, Result: "weird", Ops: 1, Bytes: 1}},
		Refusals: []plugins.Refusal{{Reason: "made-up", Count: 2}, {Reason: plugins.RefusedOutOfBounds, Count: 3}},
	}
	none := &reporter{err: fmt.Errorf("no stats: %w", errdefs.ErrNotSupported)}
	n.setTransports(metrics.TransportState{Name: "tcp", Healthy: true, Instance: odd, Stats: odd},
		metrics.TransportState{Name: "ucx", Healthy: true, Instance: none, Stats: none})
	f := n.gather(t)
	for _, m := range f["kvconnect_served_ops_total"].GetMetric() {
		for _, l := range m.GetLabel() {
			if (l.GetName() == "op" && l.GetValue() != "read" && l.GetValue() != "write") || (l.GetName() == "result" && l.GetValue() == "weird") {
				t.Errorf("unbounded label %s=%s", l.GetName(), l.GetValue())
			}
		}
	}
	if v := f.Value("kvconnect_refusals_total", "reason", "other"); v != 2 {
		t.Errorf("unknown refusal reasons count as other: %v", v)
	}
	if v := f.Value("kvconnect_refusals_total", "reason", "out_of_bounds"); v != 3 {
		t.Errorf("out_of_bounds %v", v)
	}
	if _, found := f.Get("kvconnect_served_bytes_total", "transport", "ucx"); found {
		t.Error("served series for a transport that reports none")
	}

	// A transport whose Stats does not return: the scrape goes on without
	// it, showing its last report.
	stuck := &stuckReporter{release: make(chan struct{})}
	defer close(stuck.release)
	stuck.set(500, nil)
	n.setTransports(metrics.TransportState{Name: "tcp", Healthy: true, Instance: stuck, Stats: stuck})
	if got := served(n.gather(t)); got != 500 {
		t.Fatalf("served %v", got)
	}
	stuck.hang.Store(true)
	if got := served(n.gather(t)); got != 500 {
		t.Fatalf("served %v from a transport that did not answer, want its last report 500", got)
	}
}

// stuckReporter ignores its context while hang is set, until released.
type stuckReporter struct {
	reporter
	hang    atomic.Bool
	release chan struct{}
}

func (r *stuckReporter) Stats(ctx context.Context) (plugins.ServedStats, error) {
	if r.hang.Load() {
		<-r.release
	}
	return r.reporter.Stats(ctx)
}

// TestBatchRecording: ops and bytes by kind and result, the histogram,
// in-flight ops back to zero, and the peer label only when asked for.
func TestBatchRecording(t *testing.T) {
	for _, peerLabels := range []bool{false, true} {
		n := newTestNode(t, metrics.Options{PeerLabels: peerLabels})
		ops := []plugins.Op{{Kind: plugins.OpWrite, Length: 100}, {Kind: plugins.OpWrite, Length: 50}, {Kind: plugins.OpRead, Length: 7}, {Kind: plugins.OpRead, Length: 9}}
		res := []plugins.OpResult{{}, {Err: fmt.Errorf("x: %w", errdefs.ErrTimeout)}, {Err: fmt.Errorf("y: %w", errdefs.ErrOutOfBounds)}, {}}
		n.BatchStarted("tcp", "10.0.0.2:15001", len(ops))
		if v := n.gather(t).Value("kvconnect_ops_in_flight", "transport", "tcp"); v != 4 {
			t.Errorf("in flight %v, want 4", v)
		}
		n.BatchDone("tcp", "10.0.0.2:15001", ops, res, 3*time.Millisecond)
		f := n.gather(t)
		for _, c := range []struct {
			op, result string
			ops, bytes float64
		}{{"write", "completed", 1, 100}, {"write", "timeout", 1, 50}, {"read", "failed", 1, 7}, {"read", "completed", 1, 9}, {"read", "canceled", 0, 0}} {
			if o, b := f.Value("kvconnect_initiated_ops_total", "op", c.op, "result", c.result), f.Value("kvconnect_initiated_bytes_total", "op", c.op, "result", c.result); o != c.ops || b != c.bytes {
				t.Errorf("peer labels %v: %s %s: %v ops %v bytes, want %v %v", peerLabels, c.op, c.result, o, b, c.ops, c.bytes)
			}
		}
		if v := f.Value("kvconnect_ops_in_flight", "transport", "tcp"); v != 0 {
			t.Errorf("in flight %v after the batch, want 0", v)
		}
		if _, found := f.Get("kvconnect_batch_duration_seconds", "peer", "10.0.0.2:15001"); found != peerLabels {
			t.Errorf("peer labels %v: peer label present %v", peerLabels, found)
		}
		if v := f.Value("kvconnect_batch_duration_seconds", "transport", "tcp"); v != 1 {
			t.Errorf("batch histogram count %v", v)
		}
	}
}

// TestChainCounters: fallbacks by from, to and step; strict refusals;
// the counters are shared by nodes on one registry and outlive them.
func TestChainCounters(t *testing.T) {
	reg := prometheus.NewRegistry()
	src := metrics.SourceFunc(func() metrics.Snapshot { return metrics.Snapshot{} })
	a := metrics.NewNode(src, metrics.Options{})
	if err := a.Register(reg); err != nil {
		t.Fatal(err)
	}
	a.Chain([]metrics.Attempt{{Transport: "rdma", Step: errdefs.StepLoadLibrary}, {Transport: "ucx", Step: "a step of its own"}, {Transport: "tcp", OK: true}}, false, true)
	a.Unregister()
	b := metrics.NewNode(src, metrics.Options{})
	if err := b.Register(reg); err != nil {
		t.Fatalf("a node after the first one unregistered: %v", err)
	}
	b.Chain([]metrics.Attempt{{Transport: "rdma", Step: errdefs.StepProbeDevices}}, true, false)
	if err := metrics.NewNode(src, metrics.Options{}).Register(reg); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("a second live node on the registry: %v", err)
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	for _, f := range fams {
		expfmt.MetricFamilyToText(&text, f)
	}
	f, err := metricstest.Parse(strings.NewReader(text.String()))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"kvconnect_fallbacks_total", []string{"from", "rdma", "to", "ucx", "step", "load_library"}, 1},
		{"kvconnect_fallbacks_total", []string{"from", "ucx", "to", "tcp", "step", "other"}, 1},
		{"kvconnect_transport_init_attempts_total", []string{"transport", "rdma", "result", "failed"}, 2},
		{"kvconnect_transport_init_attempts_total", []string{"transport", "tcp", "result", "ok"}, 1},
		{"kvconnect_strict_refusals_total", []string{"transport", "rdma", "step", "probe_devices"}, 1},
	} {
		if got := f.Value(c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v\n%s", c.name, c.labels, got, c.want, f.Dump("kvconnect_"))
		}
	}
}

// TestMetadataState: a metadata client's counts show per backend, its
// latency histograms with cumulative buckets in seconds; none without a
// client.
func TestMetadataState(t *testing.T) {
	n := newTestNode(t, metrics.Options{})
	if _, found := n.gather(t).Get("kvconnect_metadata_connected"); found {
		t.Fatal("metadata metrics without a metadata service")
	}
	n.mu.Lock()
	n.snap.Metadata = &metrics.MetadataState{Backend: "etcd", Connected: true, Publishes: 3, Renewals: 7, Resolves: 10, CacheHits: 8, ResolveErrors: 1, Gone: 2,
		ResolveLatency: metrics.Latency{Count: 10, Sum: 25 * time.Millisecond, Buckets: []metrics.LatencyBucket{
			{UpperBound: time.Millisecond, Count: 8}, {UpperBound: 10 * time.Millisecond, Count: 2}, {Count: 0}}}}
	n.mu.Unlock()
	f := n.gather(t)
	for name, want := range map[string]float64{"kvconnect_metadata_connected": 1, "kvconnect_metadata_publishes_total": 3, "kvconnect_metadata_lease_renewals_total": 7,
		"kvconnect_metadata_resolves_total": 10, "kvconnect_metadata_resolve_cache_hits_total": 8, "kvconnect_metadata_resolve_errors_total": 1,
		"kvconnect_metadata_segments_gone_total": 2, "kvconnect_metadata_resolve_duration_seconds": 10} {
		if got := f.Value(name, "backend", "etcd"); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	h := f["kvconnect_metadata_resolve_duration_seconds"].GetMetric()[0].GetHistogram()
	if h.GetSampleSum() != 0.025 || len(h.GetBucket()) != 3 || h.GetBucket()[0].GetUpperBound() != 0.001 || h.GetBucket()[0].GetCumulativeCount() != 8 || h.GetBucket()[1].GetCumulativeCount() != 10 {
		t.Errorf("resolve histogram %v", h)
	}
}

// gateReporter reports like reporter, but once gated its Stats signals
// entered and waits for open (or its context).
type gateReporter struct {
	reporter
	gated   atomic.Bool
	entered chan struct{}
	open    chan struct{}
}

func (r *gateReporter) Stats(ctx context.Context) (plugins.ServedStats, error) {
	if r.gated.CompareAndSwap(true, false) {
		close(r.entered)
		select {
		case <-r.open:
		case <-ctx.Done():
		}
	}
	return r.reporter.Stats(ctx)
}

// TestOverlappingScrapesAroundARestart: a scrape that saw the transports
// before a plugin restart and ends after a later scrape that saw the new
// instance must not bring the replaced instance back, nor retire the new
// one: either way its counts were added twice, for good.
func TestOverlappingScrapesAroundARestart(t *testing.T) {
	n := newTestNode(t, metrics.Options{})
	old := &gateReporter{entered: make(chan struct{}), open: make(chan struct{})}
	old.set(1000, nil)
	n.setTransports(metrics.TransportState{Name: "tcp", Plugin: true, PluginRunning: true, Healthy: true, Instance: old, Stats: old})
	if got := served(n.gather(t)); got != 1000 {
		t.Fatalf("served %v, want 1000", got)
	}
	old.gated.Store(true)
	first := make(chan struct{})
	go func() { defer close(first); n.reg.Gather() }() // sees the old instance
	<-old.entered
	renewed := &reporter{}
	renewed.set(300, nil)
	n.setTransports(metrics.TransportState{Name: "tcp", Plugin: true, PluginRunning: true, Healthy: true, Restarts: 1, Instance: renewed, Stats: renewed})
	second := make(chan struct{})
	go func() { defer close(second); n.reg.Gather() }() // sees the new one
	// Let the second scrape end first if it can (it must not depend on
	// it: a scrape that waits for the first is what makes this right).
	select {
	case <-second:
	case <-time.After(2 * time.Second):
	}
	close(old.open)
	<-first
	<-second
	for range 2 {
		if got := served(n.gather(t)); got != 1300 {
			t.Fatalf("served %v after overlapping scrapes around a restart, want 1000 (replaced) + 300 (new)", got)
		}
	}
}
