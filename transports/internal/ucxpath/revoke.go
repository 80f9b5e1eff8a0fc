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
}

// startRevoke tells every client that regs (or, closing, everything) are
// gone and collects acknowledgements until deadline; then, if set, runs
// after the outcome is known.
func (l *loop) startRevoke(regs []liveRegion, reason uint8, deadline time.Time, then func(error)) *revocation {
	l.nextSeq++
	rv := &revocation{seq: l.nextSeq, waiting: map[uint64]*client{}, deadline: deadline, done: make(chan error, 1), then: then}
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
	rv.done <- err
	if rv.then != nil {
		rv.then(err)
	}
}

// abandonRevoke gives up on a revocation whose caller stopped waiting; the
// region stays registered with UCX until Close.
func (l *loop) abandonRevoke(rv *revocation, lm *localMem) {
	l.finishRevoke(rv, nil)
	l.leaked = append(l.leaked, lm)
}
