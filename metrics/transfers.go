package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvconnect/kvconnect/plugins"
)

// transferSet is the series one transport (and, with peer labels, one
// peer) records a batch into, resolved once.
type transferSet struct {
	ops, bytes [2][numResults]prometheus.Counter
	seconds    prometheus.Observer
	inFlight   prometheus.Gauge
}

type setKey struct{ transport, peer string }

func (n *Node) set(transport, peer string) *transferSet {
	if !n.opts.PeerLabels {
		peer = ""
	}
	k := setKey{transport, peer}
	n.setsMu.RLock()
	s := n.sets[k]
	n.setsMu.RUnlock()
	if s != nil {
		return s
	}
	n.setsMu.Lock()
	defer n.setsMu.Unlock()
	if s = n.sets[k]; s != nil {
		return s
	}
	labels := func(vs ...string) []string {
		if n.opts.PeerLabels {
			return append(vs, peer)
		}
		return vs
	}
	s = &transferSet{seconds: n.batchSeconds.WithLabelValues(labels(transport)...), inFlight: n.inFlight.WithLabelValues(transport)}
	for k, op := range opLabels {
		for r, res := range initiatedResults {
			s.ops[k][r] = n.initiatedOps.WithLabelValues(labels(transport, op, res)...)
			s.bytes[k][r] = n.initiatedBytes.WithLabelValues(labels(transport, op, res)...)
		}
	}
	n.sets[k] = s
	return s
}

// BatchStarted records a batch of ops ops submitted to peer over
// transport (ops in flight).
func (n *Node) BatchStarted(transport, peer string, ops int) {
	n.set(transport, peer).inFlight.Add(float64(ops))
}

// BatchDone records a batch BatchStarted recorded, once every op has its
// result: ops and bytes by op kind and result, and its duration.
func (n *Node) BatchDone(transport, peer string, ops []plugins.Op, results []plugins.OpResult, elapsed time.Duration) {
	s := n.set(transport, peer)
	var cnt [2][numResults]struct{ ops, bytes uint64 }
	for i := range ops {
		k := ops[i].Kind
		if k > plugins.OpWrite || i >= len(results) {
			continue
		}
		c := &cnt[k][resultOf(results[i].Err)]
		c.ops++
		c.bytes += ops[i].Length
	}
	for k := range cnt {
		for r := range cnt[k] {
			if c := cnt[k][r]; c.ops > 0 {
				s.ops[k][r].Add(float64(c.ops))
				s.bytes[k][r].Add(float64(c.bytes))
			}
		}
	}
	s.seconds.Observe(elapsed.Seconds())
	s.inFlight.Sub(float64(len(ops)))
}
