package metadata

import (
	"sync/atomic"
	"time"
)

// Counters count what a Service did since Open. Every field only grows.
type Counters struct {
	// Publishes counts successful Publish calls.
	Publishes uint64 `json:"publishes"`
	// Renewals counts lease keepalives (etcd) and key refreshes (Redis,
	// HTTP) that succeeded.
	Renewals uint64 `json:"renewals"`
	// Republishes counts the times the published keys were written again
	// on the service's own: after the etcd lease expired, or when a Redis
	// or HTTP service came back.
	Republishes uint64 `json:"republishes"`
	// Resolves counts Resolve and ResolveRPC calls; CacheHits those
	// answered from the cache; ResolveErrors those that failed.
	Resolves      uint64 `json:"resolves"`
	CacheHits     uint64 `json:"cache_hits"`
	ResolveErrors uint64 `json:"resolve_errors"`
	// Requests counts requests sent to the service (every kind, the
	// background ones included); RequestErrors those that failed.
	Requests      uint64 `json:"requests"`
	RequestErrors uint64 `json:"request_errors"`
	// Gone counts segments reported gone (their key disappeared).
	Gone uint64 `json:"gone"`
	// Outages counts the times the service was lost.
	Outages uint64 `json:"outages"`
}

// counters is Counters with atomic fields.
type counters struct {
	publishes, renewals, republishes, resolves, cacheHits, resolveErrors,
	requests, requestErrors, gone, outages atomic.Uint64
}

func (c *counters) snapshot() Counters {
	return Counters{
		Publishes: c.publishes.Load(), Renewals: c.renewals.Load(), Republishes: c.republishes.Load(),
		Resolves: c.resolves.Load(), CacheHits: c.cacheHits.Load(), ResolveErrors: c.resolveErrors.Load(),
		Requests: c.requests.Load(), RequestErrors: c.requestErrors.Load(), Gone: c.gone.Load(), Outages: c.outages.Load(),
	}
}

// bucketBounds are the upper bounds of the latency histogram buckets: 1,
// 2.5 and 5 times each power of ten from 10 µs to 10 s.
var bucketBounds = func() []time.Duration {
	var out []time.Duration
	for d := 10 * time.Microsecond; d <= 10*time.Second; d *= 10 {
		out = append(out, d, d*5/2, d*5)
	}
	return out[:len(out)-2] // up to 10 s
}()

// Histogram is a latency distribution, in the shape a Prometheus histogram
// exports: Buckets[i].Count counts observations at most UpperBound and
// above the previous bound (not cumulative); the last bucket has no upper
// bound (UpperBound 0).
type Histogram struct {
	Count   uint64            `json:"count"`
	Sum     time.Duration     `json:"sum"`
	Last    time.Duration     `json:"last"`
	Buckets []HistogramBucket `json:"buckets"`
}

// HistogramBucket is one bucket of a Histogram.
type HistogramBucket struct {
	UpperBound time.Duration `json:"upper_bound"` // 0: no bound
	Count      uint64        `json:"count"`
}

// Mean is Sum/Count (0 without observations).
func (h Histogram) Mean() time.Duration {
	if h.Count == 0 {
		return 0
	}
	return h.Sum / time.Duration(h.Count)
}

// Quantile estimates the q-quantile (0 < q <= 1) as the upper bound of
// the bucket it falls in (the largest bound for the open bucket).
func (h Histogram) Quantile(q float64) time.Duration {
	if h.Count == 0 {
		return 0
	}
	rank := uint64(q * float64(h.Count))
	if rank == 0 {
		rank = 1
	}
	var seen uint64
	for _, b := range h.Buckets {
		seen += b.Count
		if seen >= rank {
			if b.UpperBound == 0 {
				return bucketBounds[len(bucketBounds)-1]
			}
			return b.UpperBound
		}
	}
	return bucketBounds[len(bucketBounds)-1]
}

// histogram records latencies; safe for concurrent use.
type histogram struct {
	counts [32]atomic.Uint64 // len(bucketBounds)+1 used
	count  atomic.Uint64
	sum    atomic.Int64
	last   atomic.Int64
}

func (h *histogram) observe(d time.Duration) {
	i := 0
	for i < len(bucketBounds) && d > bucketBounds[i] {
		i++
	}
	h.counts[i].Add(1)
	h.count.Add(1)
	h.sum.Add(int64(d))
	h.last.Store(int64(d))
}

func (h *histogram) snapshot() Histogram {
	out := Histogram{Count: h.count.Load(), Sum: time.Duration(h.sum.Load()), Last: time.Duration(h.last.Load()),
		Buckets: make([]HistogramBucket, len(bucketBounds)+1)}
	for i := range out.Buckets {
		if i < len(bucketBounds) {
			out.Buckets[i].UpperBound = bucketBounds[i]
		}
		out.Buckets[i].Count = h.counts[i].Load()
	}
	return out
}
