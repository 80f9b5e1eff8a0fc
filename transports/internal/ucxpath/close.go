package ucxpath

import (
	"fmt"
	"time"

	"go.uber.org/zap"
)

// beginClose starts closing: queued ops fail, clients are told this node's
// regions are gone and acknowledge, peers are torn down (their ops in
// flight end), and the endpoints are closed; the loop exits when that is
// done or at the deadline.
func (l *loop) beginClose(deadline time.Time) {
	if l.closing {
		return
	}
	l.closing = true
	l.closeDeadline = deadline
	l.closePhase = closeRevoke
	l.issue()
	l.startRevoke(nil, revokeClosing, deadline, func(err error) {
		if err != nil {
			l.log.Warn(l.name+": closing without every peer's acknowledgement", zap.Error(err))
		}
		for _, p := range l.peers {
			l.teardownPeer(p, l.closedErr)
		}
		l.closePhase = closePeers
	}, nil)
}

// advanceClose moves the close along as its conditions are met.
func (l *loop) advanceClose() {
	late := time.Now().After(l.closeDeadline)
	if l.closePhase == closePeers {
		if len(l.busy) > 0 && !late {
			return
		}
		for _, c := range l.conns {
			l.closeConn(c, c.err != nil)
		}
		l.closePhase = closeConns
	}
	if l.closePhase != closeConns {
		return
	}
	closing := 0
	for _, c := range l.byEP {
		if !processGone(c) { // a dead process's endpoint never finishes closing
			closing++
		}
	}
	if closing == 0 || late {
		if closing > 0 {
			l.log.Warn(l.name+": endpoints still closing at the deadline", zap.Int("endpoints", closing))
		}
		l.exit = true
	}
}

// destroyUCX releases the rkeys, memory registrations, worker and context.
func (l *loop) destroyUCX() {
	for _, c := range l.byEP {
		for p := range c.peers {
			l.destroyRkeys(p)
		}
	}
	l.unmapAll()
	l.w.Destroy()
}

// unmapAll undoes every memory registration: the regions registered, the
// deregistrations some peer did not acknowledge (l.leaked), and those
// Close overtook (revocation.lm). Once the loop stopped, no op of this
// node touches the memory again, whether the worker is destroyed or
// abandoned; a peer still writing or reading it gets an access error.
func (l *loop) unmapAll() {
	for id, lm := range l.mems {
		l.w.MemUnmap(lm.memh)
		delete(l.mems, id)
	}
	for _, lm := range l.leaked {
		l.w.MemUnmap(lm.memh)
	}
	l.leaked = nil
	for _, rv := range l.revokes {
		if rv.lm != nil {
			l.w.MemUnmap(rv.lm.memh)
			rv.lm = nil
		}
	}
}

// finish releases everything once the loop stopped: UCX first (so it lets
// go of memory), then what was still waiting on it.
func (l *loop) finish() {
	l.markStopped() // before the wake fd closes; queued commands run below
	if n := len(l.slots) - len(l.free); n > 0 {
		// UCX 1.13 asserts (and aborts the process) in ucp_worker_destroy
		// when an endpoint still has requests, which happens when a peer
		// without error handling died with ops in flight. Leak the worker
		// instead: it is never progressed again, so UCX touches no memory.
		l.log.Error(l.name+": UCX still holds requests at close (a peer died or did not answer); leaving the UCX worker allocated",
			zap.Int("requests", n))
		l.unmapAll()
		l.w.Abandon()
	} else {
		l.destroyUCX()
	}
	// UCX lets go of all memory now: fail what was in flight or queued.
	for s := range l.slots {
		sl := &l.slots[s]
		if sl.kind == slotOp {
			if !sl.abandoned && sl.b.res[sl.i].Err == nil {
				sl.b.res[sl.i].Err = fmt.Errorf("%s: %s to %s: %w", l.name, sl.b.ops[sl.i].Kind, sl.p.name, l.closedErr)
			}
			sl.b.release(sl.i)
			sl.releaseHeld()
		}
	}
	for b := range l.batches {
		for i := b.next; i < len(b.ops); i++ {
			if b.res[i].Err == nil {
				b.res[i].Err = l.closedErr
			}
		}
		l.failWrites(b, fmt.Errorf("%s: WRITE not confirmed: %w", l.name, l.closedErr))
		l.finishBatch(b)
	}
	l.runq = nil
	for _, rv := range l.revokes {
		l.finishRevoke(rv, l.closedErr)
	}
	for _, p := range l.peers {
		l.connectFailed(p, l.closedErr)
	}
	l.runCommands() // commands accepted before the stop: they see closing
}
