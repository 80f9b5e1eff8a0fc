package ucxpath

import (
	"fmt"
	"time"

	ucxlib "github.com/kvconnect/kvconnect/internal/ucx"
	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/plugins/regions"
)

// batch is one Transfer call.
type batch struct {
	p        *peer
	ops      []plugins.Op
	res      []plugins.OpResult
	local    []*regions.Entry // acquired local regions, released when UCX is done
	laddr    []uintptr
	rr       []*remoteRegion
	raddr    []uint64
	next     int // next op to issue
	inflight int
	wrote    bool // some WRITE completed locally: flush before reporting
	flushing bool
	cancel   error
	finished bool
	done     chan struct{}
}

func (l *loop) enqueueBatch(b *batch) {
	if l.closing {
		for i := range b.ops {
			if b.res[i].Err == nil {
				b.res[i].Err = l.closedErr
			}
		}
		b.finished = true
		b.releaseAll()
		close(b.done)
		return
	}
	l.batches[b] = struct{}{}
	l.runq = append(l.runq, b)
}

func (l *loop) cancelBatch(b *batch, err error) {
	if !b.finished && b.cancel == nil {
		b.cancel = err
		l.issue()
	}
}

// blocked says why op i of b must not be issued, or nil.
func (l *loop) blocked(b *batch, i int) error {
	if b.cancel != nil {
		return b.cancel
	}
	if err := l.peerBlocked(b.p); err != nil {
		return fmt.Errorf("%s: %s to %s: %w", l.name, b.ops[i].Kind, b.p.name, err)
	}
	return b.rr[i].revoked
}

// peerBlocked says why nothing may be issued to p, or nil.
func (l *loop) peerBlocked(p *peer) error {
	switch {
	case l.closing:
		return l.closedErr
	case p.err != nil:
		return p.err
	}
	return p.conn.usable()
}

// issue posts queued ops while slots are free.
func (l *loop) issue() {
	l.post = l.post[:0]
	now := time.Now()
	for len(l.runq) > 0 {
		b := l.runq[0]
		for b.next < len(b.ops) {
			i := b.next
			if b.res[i].Err != nil {
				b.next++
				continue
			}
			if err := l.blocked(b, i); err != nil {
				b.release(i)
				b.res[i].Err = err
				b.next++
				continue
			}
			s, ok := l.allocSlot(slotOp)
			if !ok {
				goto post
			}
			l.slots[s].b, l.slots[s].i, l.slots[s].p = b, i, b.p
			kind := ucxlib.OpPut
			if b.ops[i].Kind == plugins.OpRead {
				kind = ucxlib.OpGet
			}
			l.post = append(l.post, ucxlib.Op{Kind: kind, Slot: s, EP: b.p.conn.ep, Local: b.laddr[i],
				Remote: b.raddr[i], Rkey: b.rr[i].rkey, Len: b.ops[i].Length})
			l.busyInc(b.p, now)
			b.inflight++
			b.next++
		}
		l.runq = l.runq[1:]
		l.maybeFinish(b)
	}
post:
	if len(l.post) == 0 {
		return
	}
	l.w.Post(l.post)
	for _, o := range l.post {
		if o.Status != ucxlib.InProgress {
			l.opDone(o.Slot, o.Status)
		}
	}
}

func (l *loop) busyInc(p *peer, now time.Time) {
	if p.inflight == 0 {
		p.lastProgress = now
		l.busy[p] = struct{}{}
	}
	p.inflight++
}

func (l *loop) busyDec(p *peer) {
	p.inflight--
	p.lastProgress = time.Now()
	if p.inflight == 0 {
		delete(l.busy, p)
		l.maybeRelease(p)
	}
}

// opDone handles the local completion of an op's PUT or GET.
func (l *loop) opDone(s uint32, st ucxlib.Status) {
	sl := l.slots[s]
	b, i, p := sl.b, sl.i, sl.p
	b.release(i)
	l.freeSlot(s)
	if sl.abandoned {
		sl.releaseHeld() // UCX is done with the memory only now
		return
	}
	b.inflight--
	if st != ucxlib.OK {
		b.res[i].Err = l.opError(b, i, st)
	} else if b.ops[i].Kind == plugins.OpWrite {
		b.wrote = true
	}
	l.maybeFinish(b)
	l.busyDec(p)
}

func (l *loop) opError(b *batch, i int, st ucxlib.Status) error {
	call := "ucp_put_nbx"
	if b.ops[i].Kind == plugins.OpRead {
		call = "ucp_get_nbx"
	}
	serr := st.Error(call)
	if err := l.peerBlocked(b.p); err != nil {
		return fmt.Errorf("%s: %s to %s: %w (%v)", l.name, b.ops[i].Kind, b.p.name, err, serr)
	}
	return fmt.Errorf("%s: %s to %s: %w", l.name, b.ops[i].Kind, b.p.name, serr)
}

// maybeFinish completes b once every op is done: WRITEs are confirmed by
// flushing the endpoint first (a PUT's completion is only local).
func (l *loop) maybeFinish(b *batch) {
	if b.finished || b.flushing || b.inflight > 0 || b.next < len(b.ops) {
		return
	}
	if !b.wrote {
		l.finishBatch(b)
		return
	}
	if err := l.peerBlocked(b.p); err != nil {
		l.failWrites(b, fmt.Errorf("%s: WRITE to %s not confirmed: %w", l.name, b.p.name, err))
		l.finishBatch(b)
		return
	}
	b.flushing = true
	p := b.p
	l.busyInc(p, time.Now())
	l.ctl(func(s uint32) ucxlib.Status {
		if p.conn.usable() != nil {
			return ucxlib.ErrNotConnected
		}
		l.slots[s].kind, l.slots[s].b, l.slots[s].p = slotFlush, b, p
		ops := []ucxlib.Op{{Kind: ucxlib.OpFlush, Slot: s, EP: p.conn.ep}}
		l.w.Post(ops)
		return ops[0].Status
	}, func(st ucxlib.Status) { l.flushDone(b, st) })
}

// flushDone ends a batch's confirming flush (unless the op was abandoned).
func (l *loop) flushDone(b *batch, st ucxlib.Status) {
	if !b.flushing {
		return // abandoned by a timeout
	}
	b.flushing = false
	if st != ucxlib.OK {
		serr := st.Error("ucp_ep_flush_nbx")
		if err := l.peerBlocked(b.p); err != nil {
			l.failWrites(b, fmt.Errorf("%s: WRITE to %s not confirmed: %w (%v)", l.name, b.p.name, err, serr))
		} else {
			l.failWrites(b, fmt.Errorf("%s: WRITE to %s not confirmed: %w", l.name, b.p.name, serr))
		}
	}
	l.finishBatch(b)
	l.busyDec(b.p)
}

func (l *loop) failWrites(b *batch, err error) {
	for i := range b.ops {
		if b.ops[i].Kind == plugins.OpWrite && b.res[i].Err == nil {
			b.res[i].Err = err
		}
	}
}

func (l *loop) finishBatch(b *batch) {
	if b.finished {
		return
	}
	b.finished = true
	delete(l.batches, b)
	b.releaseAll()
	close(b.done)
}

// drain handles what the last progress produced; false if nothing.
func (l *loop) drain() bool {
	any := false
	l.cbuf = l.w.Completions(l.cbuf[:0])
	for _, c := range l.cbuf {
		any = true
		switch l.slots[c.Slot].kind {
		case slotOp:
			l.opDone(c.Slot, c.Status)
		case slotFlush, slotCtl:
			fn := l.slots[c.Slot].fn
			l.freeSlot(c.Slot)
			if fn != nil {
				fn(c.Status)
			}
		}
	}
	l.ebuf = l.w.EndpointErrors(l.ebuf[:0])
	for _, e := range l.ebuf {
		any = true
		if c := l.byEP[e.EP]; c != nil {
			l.connFailed(c, e.Status.Error("endpoint"))
		}
	}
	for {
		n, ok := l.w.NextMessage(l.msg)
		if !ok {
			break
		}
		any = true
		l.handleMessage(l.msg[:n])
	}
	return any
}
func (b *batch) release(i int) {
	if b.local[i] != nil {
		b.local[i].Release()
		b.local[i] = nil
	}
}

func (b *batch) releaseAll() {
	for i := range b.local {
		b.release(i)
	}
}
