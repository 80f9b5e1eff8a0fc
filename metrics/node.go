package metrics

import (
	"errors"
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvconnect/kvconnect/errdefs"
	"github.com/kvconnect/kvconnect/internal/version"
)

// Options configures a Node.
type Options struct {
	// PeerLabels adds a peer label (the peer's session id) to the
	// initiated transfer metrics and the batch latency: one set of series
	// per peer, for small clusters only (setting metrics_peer_labels).
	PeerLabels bool
}

// Node is one node's metrics: a prometheus.Collector of everything the
// node exposes. Its recording methods are safe for concurrent use, cheap
// (atomic adds on cached series) and never block; Collect reads Source
// and asks each transport for what it served, bounded by StatsTimeout.
type Node struct {
	src  Source
	opts Options

	initiatedBytes    *prometheus.CounterVec
	initiatedOps      *prometheus.CounterVec
	batchSeconds      *prometheus.HistogramVec
	inFlight          *prometheus.GaugeVec
	pluginStarts      *prometheus.CounterVec
	pluginCrashes     *prometheus.CounterVec
	handshakes        *prometheus.CounterVec
	handshakeRefusals *prometheus.CounterVec
	suspects          prometheus.Counter
	fastFails         prometheus.Counter
	mooncakeOpened    prometheus.Counter
	buildInfo         prometheus.Gauge

	// scrape orders scrapes: each applies the transports it saw (which
	// instances are up, which were replaced) after the one before it did.
	// Two overlapping scrapes around a plugin restart otherwise let the
	// older view bring a replaced instance back, or retire the new one,
	// and its counts were added twice, for good.
	scrape sync.Mutex
	served servedTracker
	ring   ringTracker

	setsMu sync.RWMutex
	sets   map[setKey]*transferSet

	regMu  sync.Mutex
	regs   []prometheus.Registerer
	chains []*chainCounters // one per registry Register was given
}

var _ prometheus.Collector = (*Node)(nil)

// NewNode makes a node's metrics, reading the node's state from src at
// scrape time. It registers nothing: call Register.
func NewNode(src Source, opts Options) *Node {
	peer := func(labels ...string) []string {
		if opts.PeerLabels {
			return append(labels, "peer")
		}
		return labels
	}
	n := &Node{src: src, opts: opts, sets: map[setKey]*transferSet{},
		initiatedBytes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvconnect_initiated_bytes_total",
			Help: "Bytes of the ops this node initiated (READs and WRITEs it submitted), by transport, op and result; result=\"completed\" are the bytes moved."},
			peer("transport", "op", "result")),
		initiatedOps: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvconnect_initiated_ops_total",
			Help: "Ops this node initiated, by transport, op and result (completed, failed, timeout, canceled)."},
			peer("transport", "op", "result")),
		batchSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "kvconnect_batch_duration_seconds",
			Help:    "Time from Submit to the completion of a whole batch this node initiated, by transport.",
			Buckets: batchBuckets}, peer("transport")),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "kvconnect_ops_in_flight",
			Help: "Ops this node submitted that have not completed yet, by transport."}, []string{"transport"}),
		pluginStarts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvconnect_plugin_starts_total",
			Help: "Transport plugin processes launched (first starts, fallback attempts and restarts), by transport."}, []string{"transport"}),
		pluginCrashes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvconnect_plugin_crashes_total",
			Help: "Transport plugin processes that died while the node ran, by transport."}, []string{"transport"}),
		handshakes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvconnect_handshakes_total",
			Help: "Handshakes this node made to fetch a peer's segment descriptor (Open and reconnects), by result: ok or the error kind."}, []string{"result"}),
		handshakeRefusals: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvconnect_handshake_refusals_total",
			Help: "Handshake connections this node's RPC port refused, by reason (unauthenticated, bad_request, no_memory)."}, []string{"reason"}),
		suspects: prometheus.NewCounter(prometheus.CounterOpts{Name: "kvconnect_peer_suspects_total",
			Help: "Times a peer became suspect: a batch to it timed out on the node's own bounds."}),
		fastFails: prometheus.NewCounter(prometheus.CounterOpts{Name: "kvconnect_peer_fast_fails_total",
			Help: "Batches failed at once because their peer was suspect."}),
		mooncakeOpened: prometheus.NewCounter(prometheus.CounterOpts{Name: "kvconnect_mooncake_peers_opened_total",
			Help: "Connections this node opened to Mooncake Transfer Engine peers (Open and reconnects)."}),
		buildInfo: prometheus.NewGauge(prometheus.GaugeOpts{Name: "kvconnect_build_info",
			Help: "Always 1; the labels say which kvconnect this is.", ConstLabels: prometheus.Labels{"version": version.Version}}),
	}
	n.buildInfo.Set(1)
	// Series that exist from the start, so increase() sees the first event.
	n.handshakes.WithLabelValues("ok")
	n.handshakeRefusals.WithLabelValues(HandshakeUnauthenticated)
	n.handshakeRefusals.WithLabelValues(HandshakeBadRequest)
	n.handshakeRefusals.WithLabelValues(HandshakeNoMemory)
	return n
}

// batchBuckets span a 4 KiB op on loopback (tens of microseconds) to a
// batch that times out (transfer_timeout, 30 s by default).
var batchBuckets = []float64{25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 500e-3, 1, 2.5, 5, 10, 30, 60}

func (n *Node) collectors() []prometheus.Collector {
	return []prometheus.Collector{n.initiatedBytes, n.initiatedOps, n.batchSeconds, n.inFlight, n.pluginStarts, n.pluginCrashes,
		n.handshakes, n.handshakeRefusals, n.suspects, n.fastFails, n.mooncakeOpened, n.buildInfo}
}

// Describe sends the descriptors of every metric the node exposes.
func (n *Node) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range n.collectors() {
		c.Describe(ch)
	}
	for _, d := range stateDescs {
		ch <- d
	}
	for _, d := range servedDescs {
		ch <- d
	}
	for _, d := range metadataDescs {
		ch <- d
	}
	for _, d := range ringDescs {
		ch <- d
	}
}

// Collect sends the node's metrics: the counters it recorded, its state
// now (from Source), what its transports served and their plugins'
// rings.
func (n *Node) Collect(ch chan<- prometheus.Metric) {
	for _, c := range n.collectors() {
		c.Collect(ch)
	}
	n.scrape.Lock()
	defer n.scrape.Unlock()
	snap := n.src.Snapshot()
	collectState(ch, &snap)
	collectMetadata(ch, snap.Metadata)
	// Both ask the plugins, each call bounded: side by side, so a scrape
	// waits for the slower, not for both.
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		n.served.collect(ch, snap.Transports)
	}()
	n.ring.collect(ch, snap.Transports)
	wg.Wait()
}

// Register registers the node's collectors on reg (never the default
// registry unless you pass it). The chain counters (init attempts,
// fallbacks, strict-mode refusals) are shared by every Node registered on
// the same registerer and stay registered, so the attempts of a New that
// failed still count; the rest is this node's and leaves with Unregister.
// A second node on the same registerer fails with ErrInvalidArgument:
// give each its own, e.g. prometheus.WrapRegistererWith(
// prometheus.Labels{"node": name}, reg).
func (n *Node) Register(reg prometheus.Registerer) error {
	if reg == nil {
		return fmt.Errorf("metrics: nil prometheus.Registerer: %w", errdefs.ErrInvalidArgument)
	}
	chain, err := chainCountersOn(reg)
	if err != nil {
		return err
	}
	if err := reg.Register(n); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			return fmt.Errorf("metrics: a kvconnect node's collectors are already registered on this prometheus.Registerer (another node?): give each node its own, e.g. prometheus.WrapRegistererWith(prometheus.Labels{\"node\": ...}, reg): %w", errdefs.ErrInvalidArgument)
		}
		return fmt.Errorf("metrics: registering the node's collectors: %v (when nodes share a registry, wrap every node's registerer with a label of its own, e.g. prometheus.WrapRegistererWith(prometheus.Labels{\"node\": name}, reg)): %w", err, errdefs.ErrInvalidArgument)
	}
	n.regMu.Lock()
	n.regs = append(n.regs, reg)
	n.chains = append(n.chains, chain)
	n.regMu.Unlock()
	return nil
}

// Unregister removes what Register registered for this node (not the
// shared chain counters). It is idempotent.
func (n *Node) Unregister() {
	n.regMu.Lock()
	regs := n.regs
	n.regs = nil
	n.regMu.Unlock()
	for _, r := range regs {
		r.Unregister(n)
	}
}
