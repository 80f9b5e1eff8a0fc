//go:build linux && cgo

package efa

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/kvconnect/kvconnect/plugins"
)

type chunkRef struct {
	b   *batch
	c   int32
	err error
}

type opRef struct {
	b  *batch
	op int32
}

// postPending posts chunks of pending batches while contexts are free,
// taking a turn of at most 64 chunks per batch so concurrent batches share
// the queue. Chunks of ops already final (failed, timed out, canceled)
// are dropped instead.
func (f *fabric) postPending() {
	var refused []*peerConn // peers whose posts returned FI_EAGAIN this round
	for turns := len(f.pend) + len(f.free)/64 + 1; turns > 0 && len(f.pend) > 0 && len(f.free) > 0; turns-- {
		b := f.pend[0]
		f.pend = f.pend[1:]
		if b.conn.dead() {
			b.failUnreported(fmt.Errorf("efa: peer %s closed: %w", b.conn.name, plugins.ErrPeerUnreachable))
			delete(f.active, b)
			continue
		}
		if slices.Contains(refused, b.conn) {
			f.pend = append(f.pend, b)
			continue
		}
		k := min(len(f.free), 64)
		ops := f.scratch[:0]
		idx := f.scratchIdx[:0]
		for i := b.next; i < len(b.chunks) && len(ops) < k; i++ {
			c := &b.chunks[i]
			if c.done {
				continue
			}
			if b.ops[c.op].reported {
				f.finish(b, c, b.ops[c.op].err)
				continue
			}
			ops = append(ops, postOp{laddr: uint64(c.laddr), n: c.n, raddr: c.raddr, rkey: c.rkey, dest: b.conn.av.addr,
				desc: c.desc, slot: f.free[len(f.free)-1-len(ops)], write: c.write})
			idx = append(idx, i)
		}
		posted, rc := 0, 0
		if len(ops) > 0 {
			posted, rc = f.c.post(ops)
		}
		for j := 0; j < posted; j++ {
			f.slots[ops[j].slot] = slotRef{b: b, c: int32(idx[j])}
		}
		f.free = f.free[:len(f.free)-posted]
		f.posted += posted
		if b.conn.posted == 0 && posted > 0 {
			b.conn.lastProgress = time.Now()
		}
		b.conn.addPosted(posted)
		// Everything before the first unposted chunk is posted or done.
		switch {
		case posted < len(idx):
			b.next = idx[posted]
		case len(idx) > 0:
			b.next = idx[len(idx)-1] + 1
		default:
			b.next = len(b.chunks)
		}
		if rc != 0 && rc != -fiEAGAIN {
			c := &b.chunks[b.next]
			b.next++
			f.finish(b, c, f.opError(c, b.conn, rc, 0, ""))
		}
		if b.next < len(b.chunks) {
			f.pend = append(f.pend, b)
		}
		if rc == -fiEAGAIN {
			// The provider's queue (or this peer's connection) is full:
			// progress first; other peers may still take work.
			refused = append(refused, b.conn)
		}
	}
}

// checkTimeouts fails the ops of batches whose peer completed nothing for
// op_timeout since the batch started, and probes the regions of batches
// stalled for probeAfter (an op to a region its owner deregistered may
// never complete).
func (f *fabric) checkTimeouts(now time.Time) {
	timeout := time.Duration(f.opts.OpTimeout)
	for b := range f.active {
		last := b.since
		if b.conn.lastProgress.After(last) {
			last = b.conn.lastProgress
		}
		idle := now.Sub(last)
		if idle >= timeout {
			b.failUnreported(fmt.Errorf("efa: peer %s completed nothing for %v (op_timeout): %w", b.conn.name, timeout, plugins.ErrTimeout))
			delete(f.active, b)
			continue
		}
		if idle < f.probeAfter || now.Sub(b.lastProbe) < f.probeAfter {
			continue
		}
		b.lastProbe = now
		for i := range b.ops {
			o := &b.ops[i]
			if !o.reported && o.rr != nil {
				p := f.probe(b.conn, o.rr)
				p.ops = append(p.ops, opRef{b: b, op: int32(i)})
			}
		}
	}
}

// newBatch makes a batch for conn.
func (f *fabric) newBatch(conn *peerConn, nops int) *batch { return newBatch(conn, nops, f.maxChunk) }

// run submits b and waits for its results.
func (f *fabric) run(ctx context.Context, b *batch, results []plugins.OpResult) error {
	start := func(dead bool) {
		switch {
		case dead:
			b.failUnreported(fmt.Errorf("efa: transport closed: %w", plugins.ErrClosed))
			return
		case b.conn.closed:
			b.failUnreported(fmt.Errorf("efa: peer %s disconnected: %w", b.conn.name, plugins.ErrClosed))
			return
		case b.conn.dead():
			b.failUnreported(fmt.Errorf("efa: peer %s closed: %w", b.conn.name, plugins.ErrPeerUnreachable))
			return
		}
		b.since = time.Now()
		b.lastProbe = b.since
		f.active[b] = struct{}{}
		if !f.verify {
			f.pend = append(f.pend, b)
			return
		}
		// Check every remote region of the batch is still registered
		// before anything is posted (see Options.VerifyRegions).
		seen := map[*remoteRegion]bool{}
		for i := range b.ops {
			rr := b.ops[i].rr
			if rr == nil || b.ops[i].reported || seen[rr] {
				continue
			}
			seen[rr] = true
			p := f.probe(b.conn, rr)
			p.gates = append(p.gates, b)
			b.gates++
		}
		if b.gates == 0 {
			f.pend = append(f.pend, b)
		}
	}
	if !f.enqueue(start) {
		err := fmt.Errorf("efa: transport closed: %w", plugins.ErrClosed)
		for i := range b.ops {
			if b.ops[i].entry != nil {
				b.ops[i].entry.Release()
				b.ops[i].entry = nil
			}
			if !b.ops[i].pre {
				results[i].Err = err
			}
		}
		return err
	}
	select {
	case <-b.done:
	case <-ctx.Done():
		cerr := fmt.Errorf("efa: transfer: %w", plugins.ContextError(ctx.Err()))
		f.enqueue(func(dead bool) {
			b.failUnreported(cerr)
			delete(f.active, b)
		})
		<-b.done // the cancel above, or teardown, reports every op
	}
	for i := range b.ops {
		if !b.ops[i].pre {
			results[i].Err = b.res[i]
		}
	}
	return nil
}

// localDesc is the descriptor ops pass for the local buffer: fi_mr_desc of
// the region when the provider wants FI_MR_LOCAL, else none.
func (f *fabric) localDesc(id uint64) (uintptr, error) {
	if f.info.MRMode&mrLocal == 0 {
		return 0, nil
	}
	f.mrMu.RLock()
	h := f.mrs[id]
	f.mrMu.RUnlock()
	if h == nil {
		return 0, fmt.Errorf("region %d has no memory registration: %w", id, plugins.ErrUnknownRegion)
	}
	return h.desc, nil
}
