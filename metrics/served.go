package metrics

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvconnect/kvconnect/errdefs"
	"github.com/kvconnect/kvconnect/plugins"
)

// StatsTimeout bounds each transport's Stats call during a scrape; a
// transport that does not answer in time shows what it reported last.
const StatsTimeout = time.Second

var (
	servedBytesDesc = desc("kvconnect_served_bytes_total",
		"Bytes of the requests this node served to peers (their READs of and WRITEs into its memory), by transport, op and result (completed, refused, failed); counted in the transport, across plugin restarts.",
		"transport", "op", "result")
	servedOpsDesc = desc("kvconnect_served_ops_total",
		"Requests this node served to peers, by transport, op and result; an op larger than the transport's chunk size arrives as several requests.",
		"transport", "op", "result")
	refusalsDesc = desc("kvconnect_refusals_total",
		"Requests and data connections this node refused as the owner of the memory, by transport and reason (out_of_bounds, unknown_region, unauthenticated, bad_request).",
		"transport", "reason")
	mooncakeServedDesc = desc("kvconnect_mooncake_connections_served_total",
		"Data connections from Mooncake Transfer Engine peers this node served, by transport.", "transport")

	servedDescs = []*prometheus.Desc{servedBytesDesc, servedOpsDesc, refusalsDesc, mooncakeServedDesc}
)

type servedKey struct{ op, result string }

// servedSum is served counts in label space: bounded keys.
type servedSum struct {
	ops, bytes map[servedKey]uint64
	refusals   map[string]uint64
	mooncake   uint64
}

func newServedSum() *servedSum {
	return &servedSum{ops: map[servedKey]uint64{}, bytes: map[servedKey]uint64{}, refusals: map[string]uint64{}}
}

// fromStats bounds a transport's report into label space.
func fromStats(st plugins.ServedStats) *servedSum {
	s := newServedSum()
	for _, o := range st.Ops {
		k := servedKey{opLabel(o.Op), oneOf(o.Result, plugins.ServedResults())}
		s.ops[k] += o.Ops
		s.bytes[k] += o.Bytes
	}
	for _, r := range st.Refusals {
		s.refusals[oneOf(r.Reason, plugins.RefusalReasons())] += r.Count
	}
	s.mooncake = st.MooncakeConnections
	return s
}

// add adds o to s.
func (s *servedSum) add(o *servedSum) {
	for k, v := range o.ops {
		s.ops[k] += v
	}
	for k, v := range o.bytes {
		s.bytes[k] += v
	}
	for k, v := range o.refusals {
		s.refusals[k] += v
	}
	s.mooncake += o.mooncake
}

// raise raises each of s's counts to o's where o's is larger, so an
// instance's counts never go down between scrapes (concurrent scrapes may
// store their answers out of order).
func (s *servedSum) raise(o *servedSum) {
	for k, v := range o.ops {
		s.ops[k] = max(s.ops[k], v)
	}
	for k, v := range o.bytes {
		s.bytes[k] = max(s.bytes[k], v)
	}
	for k, v := range o.refusals {
		s.refusals[k] = max(s.refusals[k], v)
	}
	s.mooncake = max(s.mooncake, o.mooncake)
}

type instanceReport struct {
	transport string
	sum       *servedSum
}

// servedTracker keeps what each transport instance last reported, and the
// sum of what instances that are gone (crashed plugins, since restarted)
// reported, per transport: served counts never go back when a plugin
// restarts. What a crashed instance served after its last report is lost.
type servedTracker struct {
	mu   sync.Mutex
	gone map[string]*servedSum // per transport
	last map[any]*instanceReport
}

func (t *servedTracker) collect(ch chan<- prometheus.Metric, transports []TransportState) {
	type answer struct {
		sum *servedSum
		ok  bool // answered
	}
	answers := askAll(transports, func(ctx context.Context, ts TransportState) (answer, bool) {
		if ts.Stats == nil {
			return answer{}, false
		}
		st, err := ts.Stats.Stats(ctx)
		if errors.Is(err, errdefs.ErrNotSupported) {
			return answer{}, false // reports nothing: no served metrics for it
		}
		a := answer{ok: err == nil}
		if err == nil {
			a.sum = fromStats(st)
		}
		return a, true
	})

	t.mu.Lock()
	if t.gone == nil {
		t.gone, t.last = map[string]*servedSum{}, map[any]*instanceReport{}
	}
	reporting := map[string]bool{}
	for i, a := range answers {
		ts := transports[i]
		reporting[ts.Name] = true
		r := t.last[ts.Instance]
		if r == nil {
			r = &instanceReport{transport: ts.Name, sum: newServedSum()}
			t.last[ts.Instance] = r
		}
		if a.ok {
			r.sum.raise(a.sum)
		}
	}
	// Instances no longer up (replaced by a restart) keep counting in
	// their transport's total.
	for inst, r := range t.last {
		if !transportsHave(transports, inst) {
			if t.gone[r.transport] == nil {
				t.gone[r.transport] = newServedSum()
			}
			t.gone[r.transport].add(r.sum)
			delete(t.last, inst)
		}
	}
	totals := map[string]*servedSum{}
	for name, g := range t.gone {
		tot := newServedSum()
		tot.add(g)
		totals[name] = tot
	}
	for _, r := range t.last {
		if totals[r.transport] == nil {
			totals[r.transport] = newServedSum()
		}
		totals[r.transport].add(r.sum)
	}
	t.mu.Unlock()

	for name, tot := range totals {
		if !reporting[name] && len(tot.ops) == 0 && len(tot.refusals) == 0 && tot.mooncake == 0 {
			continue
		}
		emitServed(ch, name, tot)
	}
}

func transportsHave(ts []TransportState, inst any) bool {
	for _, t := range ts {
		if t.Instance == inst {
			return true
		}
	}
	return false
}

// emitServed sends one transport's served counts. Every (op, result) and
// reason shows, with 0 where nothing happened yet, so rate() and
// increase() see the first one.
func emitServed(ch chan<- prometheus.Metric, transport string, s *servedSum) {
	for _, op := range opLabels {
		for _, res := range plugins.ServedResults() {
			k := servedKey{op, res}
			ch <- prometheus.MustNewConstMetric(servedOpsDesc, prometheus.CounterValue, float64(s.ops[k]), transport, op, res)
			ch <- prometheus.MustNewConstMetric(servedBytesDesc, prometheus.CounterValue, float64(s.bytes[k]), transport, op, res)
		}
	}
	for _, reason := range plugins.RefusalReasons() {
		ch <- prometheus.MustNewConstMetric(refusalsDesc, prometheus.CounterValue, float64(s.refusals[reason]), transport, reason)
	}
	if v := s.refusals[other]; v > 0 {
		ch <- prometheus.MustNewConstMetric(refusalsDesc, prometheus.CounterValue, float64(v), transport, other)
	}
	ch <- prometheus.MustNewConstMetric(mooncakeServedDesc, prometheus.CounterValue, float64(s.mooncake), transport)
}
