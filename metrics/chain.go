package metrics

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvconnect/kvconnect/errdefs"
)

// Attempt is one try of the fallback chain at bringing a transport up.
type Attempt struct {
	Transport string
	OK        bool
	// Step is where a failed attempt failed (its diagnosis' step, one of
	// the errdefs.Step* constants).
	Step string
}

// chainCounters count what fallback chains did. They are shared by every
// node registered on one registerer (see Register).
type chainCounters struct {
	attempts  *prometheus.CounterVec
	fallbacks *prometheus.CounterVec
	strict    *prometheus.CounterVec
}

func newChainCounters() *chainCounters {
	return &chainCounters{
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvconnect_transport_init_attempts_total",
			Help: "Attempts of the fallback chain at bringing a transport up, by transport and result (ok, failed)."}, []string{"transport", "result"}),
		fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvconnect_fallbacks_total",
			Help: "Times the chain moved on from transport from to transport to because from failed at step (a diagnosis step in snake case)."}, []string{"from", "to", "step"}),
		strict: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvconnect_strict_refusals_total",
			Help: "Nodes that did not start because their transport failed and fallback is disabled (fallback: []), by transport and step."}, []string{"transport", "step"}),
	}
}

// chainCountersOn registers chain counters on reg, or finds the ones an
// earlier node registered there.
func chainCountersOn(reg prometheus.Registerer) (*chainCounters, error) {
	c := newChainCounters()
	var err error
	if c.attempts, err = registerOrReuse(reg, c.attempts); err != nil {
		return nil, err
	}
	if c.fallbacks, err = registerOrReuse(reg, c.fallbacks); err != nil {
		return nil, err
	}
	if c.strict, err = registerOrReuse(reg, c.strict); err != nil {
		return nil, err
	}
	return c, nil
}

func registerOrReuse(reg prometheus.Registerer, c *prometheus.CounterVec) (*prometheus.CounterVec, error) {
	err := reg.Register(c)
	if err == nil {
		return c, nil
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(*prometheus.CounterVec); ok {
			return existing, nil
		}
	}
	return nil, fmt.Errorf("metrics: registering the chain counters: %v (when nodes share a registry, wrap every node's registerer with a label of its own, e.g. prometheus.WrapRegistererWith(prometheus.Labels{\"node\": name}, reg)): %w", err, errdefs.ErrInvalidArgument)
}

// Chain records what the fallback chain did: every attempt, a fallback
// for each failed attempt the chain moved on from, and, when the node did
// not start in strict mode, a strict-mode refusal.
func (n *Node) Chain(attempts []Attempt, strict, started bool) {
	n.regMu.Lock()
	chains := n.chains
	n.regMu.Unlock()
	for _, c := range chains {
		for i, a := range attempts {
			result := "failed"
			if a.OK {
				result = "ok"
			}
			c.attempts.WithLabelValues(a.Transport, result).Inc()
			if !a.OK && i+1 < len(attempts) {
				c.fallbacks.WithLabelValues(a.Transport, attempts[i+1].Transport, stepLabel(a.Step)).Inc()
			}
		}
		if strict && !started && len(attempts) > 0 {
			c.strict.WithLabelValues(attempts[0].Transport, stepLabel(attempts[0].Step)).Inc()
		}
	}
}
