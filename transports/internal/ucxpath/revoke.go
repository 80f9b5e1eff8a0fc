package ucxpath

import (
	"time"
)

// revocation waits for clients to acknowledge a revoke.
type revocation struct {
	seq      uint64
	waiting  map[uint64]*client
	deadline time.Time
	done     chan error // buffered; receives the outcome once
	finished bool
	then     func(error) // loop-side continuation, or nil

	// lm is the region a deregistration revokes, or nil. The loop owns
	// it from the start: once every peer acknowledged, finishRevoke
	// unmaps it from UCX (unmapErr says how that went); otherwise it
	// stays registered until Close unmaps it (l.leaked, or destroyUCX
	// for a revocation Close overtook). So no outcome, a caller that
	// gave up or a Close that came first, leaves it registered past
	// Close.
	lm       *localMem
	unmapErr error // set before done receives the outcome
}

// startRevoke tells every client that regs (or, closing, everything) are
// gone and collects acknowledgements until deadline; then, if set, runs
// after the outcome is known. lm, if set, is the deregistered region the
// revocation owns (revocation.lm).
func (l *loop) startRevoke(regs []liveRegion, reason uint8, deadline time.Time, then func(error), lm *localMem) *revocation {
	l.nextSeq++
	rv := &revocation{seq: l.nextSeq, waiting: map[uint64]*client{}, deadline: deadline, done: make(chan error, 1), then: then, lm: lm}
	l.revokes[rv.seq] = rv
	for _, cl := range l.clients {
		if cl.conn.usable() != nil {
			continue
		}
		rv.waiting[cl.id] = cl
		rest := regs
		for first := true; first || len(rest) > 0; first = false {
			n := min(len(rest), maxRegionsPerMessage)
			l.send(cl.conn, message{typ: msgRevoke, client: cl.id, seq: rv.seq, reason: reason, regions: rest[:n]}, nil)
			rest = rest[n:]
		}
	}
	l.checkRevoke(rv)
	return rv
}

func (l *loop) checkRevoke(rv *revocation) {
	if len(rv.waiting) == 0 {
		l.finishRevoke(rv, nil)
	}
}

func (l *loop) finishRevoke(rv *revocation, err error) {
	if rv.finished {
		return
	}
	rv.finished = true
	delete(l.revokes, rv.seq)
	if lm := rv.lm; lm != nil {
		rv.lm = nil
		if err == nil {
			rv.unmapErr = l.w.MemUnmap(lm.memh)
		} else {
			// Some peer may still access the region: it stays registered
			// with UCX (and its owner must keep it mapped) until Close.
			l.leaked = append(l.leaked, lm)
		}
	}
	rv.done <- err
	if rv.then != nil {
		rv.then(err)
	}
}

// abandonRevoke gives up on a revocation whose caller stopped waiting
// (err says why); a region it revokes stays registered with UCX until
// Close. A revocation that finished already keeps its outcome.
func (l *loop) abandonRevoke(rv *revocation, err error) {
	l.finishRevoke(rv, err)
}
