package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// MetadataObserver is what a metadata client (etcd, HTTP or Redis
// metadata service; package connector hands it one) reports, so its work
// shows in the node's metrics. backend is the service kind: "etcd",
// "http", "redis" (any other value shows as "other"); err is nil on
// success. Calls must be cheap and safe from many goroutines; they never
// block. Node implements it; NopMetadata when metrics are off.
//
// Metric names: kvconnect_metadata_publishes_total{backend,result},
// kvconnect_metadata_lease_renewals_total{backend,result} (result is "ok"
// or the error's kind, errdefs.Kind), kvconnect_metadata_resolve_duration_seconds{backend}
// and kvconnect_metadata_resolve_errors_total{backend,kind}.
type MetadataObserver interface {
	// Published records one publish (put) of this node's descriptor.
	Published(backend string, err error)
	// LeaseRenewed records one keep-alive of the node's lease.
	LeaseRenewed(backend string, err error)
	// Resolved records one lookup of a peer's descriptor that went to the
	// service (not a cache hit) and how long it took.
	Resolved(backend string, took time.Duration, err error)
}

// NopMetadata is the MetadataObserver that records nothing.
type NopMetadata struct{}

func (NopMetadata) Published(string, error)               {}
func (NopMetadata) LeaseRenewed(string, error)            {}
func (NopMetadata) Resolved(string, time.Duration, error) {}

var (
	_ MetadataObserver = NopMetadata{}
	_ MetadataObserver = (*Node)(nil)
)

// MetadataBackends are the backend label's values.
var MetadataBackends = []string{"etcd", "http", "redis"}

type metadataMetrics struct {
	publishes, renewals, resolveErrors *prometheus.CounterVec
	resolveSeconds                     *prometheus.HistogramVec
}

func newMetadataMetrics() metadataMetrics {
	return metadataMetrics{
		publishes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvconnect_metadata_publishes_total",
			Help: "Publishes of this node's segment descriptor to a metadata service, by backend and result (ok or the error kind)."}, []string{"backend", "result"}),
		renewals: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvconnect_metadata_lease_renewals_total",
			Help: "Keep-alives of this node's metadata lease, by backend and result (ok or the error kind)."}, []string{"backend", "result"}),
		resolveErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvconnect_metadata_resolve_errors_total",
			Help: "Peer descriptor lookups in a metadata service that failed, by backend and error kind."}, []string{"backend", "kind"}),
		resolveSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "kvconnect_metadata_resolve_duration_seconds",
			Help:    "Time of peer descriptor lookups that went to a metadata service (cache misses), by backend.",
			Buckets: []float64{1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 500e-3, 1, 2.5, 5, 10}}, []string{"backend"}),
	}
}

func (m *metadataMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.publishes, m.renewals, m.resolveErrors, m.resolveSeconds}
}

// Published implements MetadataObserver.
func (n *Node) Published(backend string, err error) {
	n.md.publishes.WithLabelValues(oneOf(backend, MetadataBackends), kindLabel(err)).Inc()
}

// LeaseRenewed implements MetadataObserver.
func (n *Node) LeaseRenewed(backend string, err error) {
	n.md.renewals.WithLabelValues(oneOf(backend, MetadataBackends), kindLabel(err)).Inc()
}

// Resolved implements MetadataObserver.
func (n *Node) Resolved(backend string, took time.Duration, err error) {
	b := oneOf(backend, MetadataBackends)
	n.md.resolveSeconds.WithLabelValues(b).Observe(took.Seconds())
	if err != nil {
		n.md.resolveErrors.WithLabelValues(b, kindLabel(err)).Inc()
	}
}
