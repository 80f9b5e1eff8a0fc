package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// MetadataState is what the node's metadata service client (etcd, Redis,
// HTTP) has counted since it opened, read at scrape time through
// Snapshot.Metadata (nil: no metadata service, P2PHANDSHAKE). Its fields
// have the shapes of package metadata's Status (Counters, ResolveLatency,
// PublishLatency), so the connector fills it with a plain copy:
//
//	ms := c.meta.svc.Status()
//	s.Metadata = &metrics.MetadataState{Backend: scheme(ms.URL), Connected: ms.Connected,
//		Publishes: ms.Publishes, Renewals: ms.Renewals, ..., ResolveLatency: latency(ms.ResolveLatency)}
//
// Every count only grows over the client's life.
type MetadataState struct {
	// Backend is "etcd", "redis" or "http" (any other value shows as
	// "other").
	Backend string
	// Connected is false while the service is lost.
	Connected bool
	// Publishes, Renewals (lease keepalives, key refreshes), Republishes
	// (keys written again after a lost lease or service), Resolves (of
	// which CacheHits were answered from the cache and ResolveErrors
	// failed), Requests to the service (RequestErrors failed), Gone
	// (segments whose key vanished) and Outages (times the service was
	// lost).
	Publishes, Renewals, Republishes, Resolves, CacheHits, ResolveErrors, Requests, RequestErrors, Gone, Outages uint64
	// ResolveLatency covers every resolve (cache hits included),
	// PublishLatency every publish.
	ResolveLatency, PublishLatency Latency
}

// Latency is a latency histogram: Buckets[i].Count counts observations at
// most UpperBound and above the previous bound (not cumulative); a bucket
// with UpperBound 0 has no bound (+Inf).
type Latency struct {
	Count   uint64
	Sum     time.Duration
	Buckets []LatencyBucket
}

// LatencyBucket is one bucket of a Latency.
type LatencyBucket struct {
	UpperBound time.Duration
	Count      uint64
}

var (
	mdConnectedDesc   = desc("kvconnect_metadata_connected", "1 while the metadata service answers, 0 while it is lost, by backend (etcd, redis, http).", "backend")
	mdPublishesDesc   = desc("kvconnect_metadata_publishes_total", "Publishes of this node's segment descriptor to the metadata service that succeeded, by backend.", "backend")
	mdRenewalsDesc    = desc("kvconnect_metadata_lease_renewals_total", "Lease keepalives (etcd) and key refreshes (Redis, HTTP) that succeeded, by backend.", "backend")
	mdRepublishDesc   = desc("kvconnect_metadata_republishes_total", "Times this node's keys were written again on the client's own (after the etcd lease expired, or the service came back), by backend.", "backend")
	mdResolvesDesc    = desc("kvconnect_metadata_resolves_total", "Lookups of a peer's descriptor through the metadata service (cache hits included), by backend.", "backend")
	mdCacheHitsDesc   = desc("kvconnect_metadata_resolve_cache_hits_total", "Lookups answered from the watch-fed cache, by backend.", "backend")
	mdResolveErrDesc  = desc("kvconnect_metadata_resolve_errors_total", "Lookups that failed, by backend.", "backend")
	mdRequestsDesc    = desc("kvconnect_metadata_requests_total", "Requests sent to the metadata service (background ones included), by backend.", "backend")
	mdRequestErrDesc  = desc("kvconnect_metadata_request_errors_total", "Requests to the metadata service that failed, by backend.", "backend")
	mdGoneDesc        = desc("kvconnect_metadata_segments_gone_total", "Peers' segments reported gone because their key vanished (a dead node's lease expired), by backend.", "backend")
	mdOutagesDesc     = desc("kvconnect_metadata_outages_total", "Times the metadata service was lost, by backend.", "backend")
	mdResolveSecsDesc = desc("kvconnect_metadata_resolve_duration_seconds", "Time of lookups of a peer's descriptor (cache hits included), by backend.", "backend")
	mdPublishSecsDesc = desc("kvconnect_metadata_publish_duration_seconds", "Time of publishes of this node's descriptor, by backend.", "backend")

	metadataDescs = []*prometheus.Desc{mdConnectedDesc, mdPublishesDesc, mdRenewalsDesc, mdRepublishDesc, mdResolvesDesc, mdCacheHitsDesc,
		mdResolveErrDesc, mdRequestsDesc, mdRequestErrDesc, mdGoneDesc, mdOutagesDesc, mdResolveSecsDesc, mdPublishSecsDesc}
)

// MetadataBackends are the backend label's values.
var MetadataBackends = []string{"etcd", "redis", "http"}

func collectMetadata(ch chan<- prometheus.Metric, m *MetadataState) {
	if m == nil {
		return
	}
	b := oneOf(m.Backend, MetadataBackends)
	ch <- prometheus.MustNewConstMetric(mdConnectedDesc, prometheus.GaugeValue, b2f(m.Connected), b)
	for _, c := range []struct {
		d *prometheus.Desc
		v uint64
	}{{mdPublishesDesc, m.Publishes}, {mdRenewalsDesc, m.Renewals}, {mdRepublishDesc, m.Republishes}, {mdResolvesDesc, m.Resolves},
		{mdCacheHitsDesc, m.CacheHits}, {mdResolveErrDesc, m.ResolveErrors}, {mdRequestsDesc, m.Requests}, {mdRequestErrDesc, m.RequestErrors},
		{mdGoneDesc, m.Gone}, {mdOutagesDesc, m.Outages}} {
		ch <- prometheus.MustNewConstMetric(c.d, prometheus.CounterValue, float64(c.v), b)
	}
	ch <- constHistogram(mdResolveSecsDesc, m.ResolveLatency, b)
	ch <- constHistogram(mdPublishSecsDesc, m.PublishLatency, b)
}

// constHistogram is l as a Prometheus histogram (cumulative buckets, in
// seconds; the unbounded bucket is the count).
func constHistogram(d *prometheus.Desc, l Latency, labels ...string) prometheus.Metric {
	buckets := map[float64]uint64{}
	var cum uint64
	for _, bk := range l.Buckets {
		cum += bk.Count
		if bk.UpperBound > 0 {
			buckets[bk.UpperBound.Seconds()] = cum
		}
	}
	return prometheus.MustNewConstHistogram(d, l.Count, l.Sum.Seconds(), buckets, labels...)
}
