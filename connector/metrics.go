package connector

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.uber.org/zap"

	"github.com/kvconnect/kvconnect/metadata"
	"github.com/kvconnect/kvconnect/metrics"
	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/plugins/host"
)

// WithMetrics registers the node's Prometheus collectors on reg (package
// metrics; docs/OBSERVABILITY.md lists them). Nothing is ever registered
// on prometheus.DefaultRegisterer unless you pass it. The node's own
// collectors leave reg when it closes (or when New fails); the chain
// counters (init attempts, fallbacks, strict-mode refusals) stay, shared
// by every node made with reg, so a New that failed still counts. A second
// node on the same reg fails New with ErrInvalidArgument: give each its
// own, e.g. prometheus.WrapRegistererWith(prometheus.Labels{"node": name},
// reg). Independently, metrics_address (Config.MetricsAddress) serves the
// node's metrics over HTTP from a registry of its own.
func WithMetrics(reg prometheus.Registerer) Option {
	return func(o *options) { o.metrics = reg }
}

// observer is what the node tells its metrics as things happen. When
// metrics are off it is nopObserver, whose methods do nothing; the
// methods must be cheap and never block (see metrics.Node).
type observer interface {
	BatchStarted(transport, peer string, ops int)
	BatchDone(transport, peer string, ops []plugins.Op, results []plugins.OpResult, elapsed time.Duration)
	PluginStarted(transport string)
	PluginCrashed(transport string)
	Handshake(err error)
	HandshakeRefused(reason string)
	PeerSuspect()
	PeerFastFail()
	MooncakePeerOpened()
}

var (
	_ observer = nopObserver{}
	_ observer = (*metrics.Node)(nil)
)

type nopObserver struct{}

func (nopObserver) BatchStarted(string, string, int)                                          {}
func (nopObserver) BatchDone(string, string, []plugins.Op, []plugins.OpResult, time.Duration) {}
func (nopObserver) PluginStarted(string)                                                      {}
func (nopObserver) PluginCrashed(string)                                                      {}
func (nopObserver) Handshake(error)                                                           {}
func (nopObserver) HandshakeRefused(string)                                                   {}
func (nopObserver) PeerSuspect()                                                              {}
func (nopObserver) PeerFastFail()                                                             {}
func (nopObserver) MooncakePeerOpened()                                                       {}

// observe is the node's observer. c.metrics is set once in New, before
// anything that records runs.
func (c *Connector) observe() observer {
	if m := c.metrics; m != nil {
		return m.node
	}
	return nopObserver{}
}

// nodeMetrics is a node's metrics while they are on.
type nodeMetrics struct {
	node *metrics.Node
	// With metrics_address: the endpoint's own registry (the node's
	// collectors, Go runtime and process metrics), its listener and, once
	// the node is up, the endpoint.
	registry *prometheus.Registry
	ln       net.Listener
	endpoint *metrics.Endpoint
}

// metricsStart turns the node's metrics on when they are asked for
// (WithMetrics, metrics_address): it registers the collectors and binds
// the endpoint's port, so a port that cannot be bound fails New at once,
// before any plugin starts.
func (c *Connector) metricsStart() error {
	addr, err := c.cfg.MetricsListenAddress()
	if err != nil {
		return fmt.Errorf("connector: %w", err)
	}
	if c.opts.metrics == nil && addr == "" {
		return nil
	}
	m := &nodeMetrics{node: metrics.NewNode(metrics.SourceFunc(c.metricsSnapshot), metrics.Options{PeerLabels: c.cfg.MetricsPeerLabels})}
	if addr != "" {
		m.registry = prometheus.NewRegistry()
		m.registry.MustRegister(collectors.NewGoCollector(), metrics.NewProcessCollector())
		if err := m.node.Register(m.registry); err != nil {
			return fmt.Errorf("connector: %w", err)
		}
		if m.ln, err = net.Listen("tcp", addr); err != nil {
			return listenError("the metrics endpoint", "metrics_address", addr, err)
		}
	}
	if c.opts.metrics != nil {
		if err := m.node.Register(c.opts.metrics); err != nil {
			if m.ln != nil {
				m.ln.Close()
			}
			return fmt.Errorf("connector: WithMetrics: %w", err)
		}
	}
	c.metrics = m
	return nil
}

// metricsChain records what the fallback chain did.
func (c *Connector) metricsChain(started bool) {
	attempts := make([]metrics.Attempt, len(c.attempts))
	for i, a := range c.attempts {
		attempts[i] = metrics.Attempt{Transport: a.Transport, OK: a.OK}
		if a.Diagnosis != nil {
			attempts[i].Step = a.Diagnosis.Step
		}
	}
	c.metrics.node.Chain(attempts, c.cfg.Fallback != nil && len(c.cfg.Fallback) == 0, started)
}

// metricsUp records the chain of a node that came up and starts serving
// the endpoint.
func (c *Connector) metricsUp() {
	m := c.metrics
	if m == nil {
		return
	}
	c.metricsChain(true)
	if m.ln != nil {
		m.endpoint = metrics.NewEndpoint(m.ln, m.registry, metricsProber{c}, c.log)
		m.endpoint.Start()
		c.log.Info("metrics endpoint up", zap.String("metrics_address", m.ln.Addr().String()))
	}
}

// metricsAbort records the chain of a New that failed and releases the
// metrics (the shared chain counters stay registered).
func (c *Connector) metricsAbort() {
	m := c.metrics
	if m == nil {
		return
	}
	c.metricsChain(false)
	m.node.Unregister()
	if m.ln != nil {
		m.ln.Close()
	}
}

// metricsStop stops the endpoint (bounded by ctx) and unregisters the
// node's collectors.
func (c *Connector) metricsStop(ctx context.Context) error {
	m := c.metrics
	if m == nil {
		return nil
	}
	m.node.Unregister()
	if m.endpoint != nil {
		if err := m.endpoint.Close(ctx); err != nil {
			return fmt.Errorf("connector: stopping the metrics endpoint: %w", contextError(err))
		}
	}
	return nil
}

// metricsAddress is the address the endpoint listens on, "" when off.
func (c *Connector) metricsAddress() string {
	if m := c.metrics; m != nil && m.ln != nil {
		return m.ln.Addr().String()
	}
	return ""
}

// metricsSnapshot is the node's state for a scrape.
func (c *Connector) metricsSnapshot() metrics.Snapshot {
	var s metrics.Snapshot
	c.mu.Lock()
	for _, at := range c.transports {
		ts := metrics.TransportState{Name: at.name, Plugin: at.plugin != nil, Healthy: at.crashed == nil, Restarts: at.restarts, Instance: at}
		if at.plugin != nil {
			select {
			case <-at.plugin.Exited():
			default:
				ts.PluginRunning = true
			}
		}
		if sr, ok := at.tr.(plugins.StatsReporter); ok {
			ts.Stats = sr
		}
		if rs, ok := host.RingStatsOf(at.plugin); ok {
			ts.Ring = &metrics.RingState{Batches: rs.Batches, CaughtSpinning: rs.CaughtSpinning, Slept: rs.Slept, Spinning: rs.Spinning}
			p := at.plugin
			ts.PluginRing = func(ctx context.Context) (metrics.PluginRingState, error) {
				ps, err := host.PluginRingStatsOf(ctx, p)
				return metrics.PluginRingState{ClaimedBySpinner: ps.ClaimedBySpinner, ClaimedBySleeper: ps.ClaimedBySleeper, ClaimedByStandby: ps.ClaimedByStandby}, err
			}
		}
		s.Transports = append(s.Transports, ts)
	}
	for _, r := range c.regions {
		s.Regions++
		s.RegisteredBytes += uint64(len(r.mem))
	}
	peers := make([]*Peer, 0, len(c.peers))
	for _, p := range c.peers {
		peers = append(peers, p)
	}
	meta := c.meta
	c.mu.Unlock()
	if meta != nil {
		s.Metadata = metadataState(meta.svc.Status())
	}
	for _, p := range peers {
		p.mu.Lock()
		ps := metrics.PeerState{Mooncake: p.desc.IsMooncake(), Suspect: p.suspect != nil}
		if p.at != nil {
			ps.Transport = p.at.name
		}
		p.mu.Unlock()
		s.Peers = append(s.Peers, ps)
	}
	return s
}

// metricsProber answers the endpoint's /healthz, /readyz and /status.
type metricsProber struct{ c *Connector }

var errNoTransport = errors.New("no transport is up yet")

// Health is nil while the preferred transport (the one the chain chose)
// is up and healthy.
func (p metricsProber) Health() error {
	c := p.c
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.closed:
		return fmt.Errorf("node %s is shutting down", c.session)
	case len(c.transports) == 0:
		return errNoTransport
	case c.transports[0].crashed != nil:
		return fmt.Errorf("preferred transport %s is down: %v", c.transports[0].name, c.transports[0].crashed)
	}
	return nil
}

// Ready is nil while the node takes work: it is not shutting down and at
// least one of its transports is up (peers that fell back to tcp still
// reach a node whose preferred transport is down).
func (p metricsProber) Ready() error {
	c := p.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return fmt.Errorf("node %s is shutting down", c.session)
	}
	var down error
	for _, at := range c.transports {
		if at.crashed == nil {
			return nil
		}
		down = at.crashed
	}
	if down == nil {
		return errNoTransport
	}
	return fmt.Errorf("no transport is up: %v", down)
}

func (p metricsProber) Status() any { return p.c.Status() }

// metadataState is the metadata service client's counts for a scrape.
func metadataState(ms metadata.Status) *metrics.MetadataState {
	return &metrics.MetadataState{Backend: string(ms.Backend), Connected: ms.Connected,
		Publishes: ms.Publishes, Renewals: ms.Renewals, Republishes: ms.Republishes, Resolves: ms.Resolves,
		CacheHits: ms.CacheHits, ResolveErrors: ms.ResolveErrors, Requests: ms.Requests, RequestErrors: ms.RequestErrors,
		Gone: ms.Gone, Outages: ms.Outages,
		ResolveLatency: latency(ms.ResolveLatency), PublishLatency: latency(ms.PublishLatency)}
}

// latency is h as the metrics package takes it.
func latency(h metadata.Histogram) metrics.Latency {
	l := metrics.Latency{Count: h.Count, Sum: h.Sum, Buckets: make([]metrics.LatencyBucket, len(h.Buckets))}
	for i, b := range h.Buckets {
		l.Buckets[i] = metrics.LatencyBucket{UpperBound: b.UpperBound, Count: b.Count}
	}
	return l
}
