//go:build linux && cgo

package efa

import (
	"fmt"
	"time"

	"github.com/kvconnect/kvconnect/plugins"
)

// probeKey names one question: is region id of conn still registered?
type probeKey struct {
	conn   *peerConn
	region uint64
}

// probe reads the word for a peer's region in the peer's status table.
// Chunks that failed wait for the answer to know why; ops that stalled
// fail at once if the region is gone.
type probe struct {
	key          probeKey
	rr           *remoteRegion
	chunks       []chunkRef
	ops          []opRef
	gates        []*batch // batches waiting for the answer before they post
	tries        int
	notBefore    time.Time
	refusedSince time.Time
	lastErr      string
	evidence     bool // an operation to the peer completed with an error
}

// probe returns the probe of rr at conn, queueing a new one if none is
// pending.
func (f *fabric) probe(conn *peerConn, rr *remoteRegion) *probe {
	k := probeKey{conn: conn, region: rr.id}
	if p := f.probes[k]; p != nil {
		return p
	}
	p := &probe{key: k, rr: rr}
	f.probes[k] = p
	f.probeQueue = append(f.probeQueue, p)
	conn.probes++
	return p
}

// postProbes posts queued probes (those due) while contexts are free. A
// probe the provider keeps refusing (FI_EAGAIN, as rxm does while it
// cannot reconnect to a dead peer) for probeAfter counts as failed.
func (f *fabric) postProbes() {
	if len(f.probeQueue) == 0 {
		return
	}
	now := time.Now()
	queue := f.probeQueue
	f.probeQueue = nil
	var later []*probe
	for i, p := range queue {
		if len(f.free) == 0 {
			later = append(later, queue[i:]...)
			break
		}
		conn := p.key.conn
		if conn.dead() {
			p.lastErr = "the peer closed"
			f.resolveProbe(p, false, false)
			continue
		}
		if p.notBefore.After(now) {
			later = append(later, p)
			continue
		}
		slot := f.free[len(f.free)-1]
		var desc uintptr
		if f.probeMR != nil {
			desc = f.probeMR.desc
		}
		op := postOp{laddr: f.probeBuf.addr() + uint64(slot)*8, n: 8, raddr: conn.status.Base + uint64(p.rr.key.Slot)*8,
			rkey: conn.statusRKey, dest: conn.av.addr, desc: desc, slot: slot}
		f.probeBuf.setWord(slot, 0)
		posted, rc := f.c.post([]postOp{op})
		switch {
		case posted == 1:
			p.refusedSince = time.Time{}
			f.free = f.free[:len(f.free)-1]
			f.slots[slot] = slotRef{pr: p}
			f.posted++
			conn.addPosted(1)
		case rc == -fiEAGAIN:
			// Refused: normal while a connection is being made (to a
			// target that may be slow to progress), a sign of a dead
			// peer once an operation to it failed. So refusals end the
			// probe after probeAfter only with that evidence, else after
			// op_timeout.
			if p.refusedSince.IsZero() {
				p.refusedSince = now
			}
			limit := time.Duration(f.opts.OpTimeout)
			if p.evidence || (!conn.lastError.IsZero() && now.Sub(conn.lastError) < limit) {
				limit = f.probeAfter
			}
			if now.Sub(p.refusedSince) < limit {
				later = append(later, p)
				continue
			}
			p.lastErr = fmt.Sprintf("the provider refused operations to the peer for %v (FI_EAGAIN)", limit)
			f.resolveProbe(p, false, false)
		default:
			p.lastErr = fmt.Sprintf("%s (%s %d)", fiStrerror(rc), fiName(rc), rc)
			f.resolveProbe(p, false, false)
		}
	}
	f.probeQueue = append(later, f.probeQueue...)
}

// probeDone handles a probe's completion; a failed probe is retried a few
// times with backoff.
func (f *fabric) probeDone(p *probe, slot uint32, e *cqError) {
	conn := p.key.conn
	conn.addPosted(-1)
	if e != nil {
		p.evidence = true
		conn.lastError = time.Now()
		p.lastErr = fmt.Sprintf("%s (%s %d)", fiStrerror(e.err), fiName(e.err), -e.err)
		if p.tries < probeRetries && !f.stopping && !conn.dead() {
			p.notBefore = time.Now().Add(probeBackoff << p.tries)
			p.tries++
			f.probeQueue = append(f.probeQueue, p)
			return
		}
		f.resolveProbe(p, false, false)
		return
	}
	f.resolveProbe(p, true, f.probeBuf.word(slot) != p.rr.key.Token)
}

// resolveProbe gives the waiters of p the answer: known says the probe
// read the peer's table, gone that the region is not registered there.
func (f *fabric) resolveProbe(p *probe, known, gone bool) {
	conn := p.key.conn
	delete(f.probes, p.key)
	conn.probes--
	for _, w := range p.chunks {
		err := w.err
		if known && gone {
			err = fmt.Errorf("%w (the operation failed with: %v)", regionGone(conn, p.rr), w.err)
		}
		f.finish(w.b, &w.b.chunks[w.c], err)
	}
	if gone || (!known && p.lastErr != "") {
		// The region is gone, or the stalled peer fails even a status
		// read (after retries): the stalled ops will not complete.
		err := regionGone(conn, p.rr)
		if !known {
			err = fmt.Errorf("efa: peer %s completes nothing and fails status reads: %s: %w", conn.name, p.lastErr, plugins.ErrPeerUnreachable)
		}
		for _, w := range p.ops {
			w.b.failOp(w.op, err)
			if w.b.unreported == 0 {
				delete(f.active, w.b)
			}
		}
	}
	for _, b := range p.gates {
		if !known || gone {
			err := regionGone(conn, p.rr)
			if !known {
				err = fmt.Errorf("efa: cannot reach peer %s to check region %d before posting: %s: %w", conn.name, p.rr.id, p.lastErr, plugins.ErrPeerUnreachable)
			}
			for i := range b.ops {
				if b.ops[i].rr == p.rr {
					b.failOp(int32(i), err)
				}
			}
			if b.unreported == 0 {
				delete(f.active, b)
			}
		}
		b.gates--
		if b.gates == 0 {
			f.pend = append(f.pend, b)
		}
	}
	f.maybeRelease(conn)
}
