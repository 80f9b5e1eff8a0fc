package ucxpath

import (
	ucxlib "github.com/kvconnect/kvconnect/internal/ucx"
	"github.com/kvconnect/kvconnect/plugins/regions"
)

type slotKind uint8

type slot struct {
	kind      slotKind
	b         *batch
	i         int
	p         *peer
	fn        func(ucxlib.Status)
	abandoned bool // its op was reported failed; release when UCX is done
	// held is an abandoned op's local region, taken from its batch (which
	// ends without waiting for UCX): UCX may still read or write it, so
	// it is released when UCX is done with the op, never before.
	held *regions.Entry
}

func (l *loop) allocSlot(kind slotKind) (uint32, bool) {
	if len(l.free) == 0 || kind == slotOp && l.opSlots >= l.opts.MaxInflight {
		return 0, false
	}
	s := l.free[len(l.free)-1]
	l.free = l.free[:len(l.free)-1]
	l.slots[s] = slot{kind: kind}
	if kind == slotOp {
		l.opSlots++
	}
	return s, true
}

// releaseHeld releases what an abandoned op's slot holds.
func (sl *slot) releaseHeld() {
	if sl.held != nil {
		sl.held.Release()
		sl.held = nil
	}
}

func (l *loop) freeSlot(s uint32) {
	if l.slots[s].kind == slotOp {
		l.opSlots--
	}
	l.slots[s] = slot{}
	l.free = append(l.free, s)
}

// ctl starts a control action (a message, a flush, an endpoint close) on a
// slot; after, if set, gets its final status. With no slot free it is
// retried later.
func (l *loop) ctl(start func(slot uint32) ucxlib.Status, after func(ucxlib.Status)) {
	s, ok := l.allocSlot(slotCtl)
	if !ok {
		l.ctlq = append(l.ctlq, func() bool {
			s, ok := l.allocSlot(slotCtl)
			if ok {
				l.startCtl(s, start, after)
			}
			return ok
		})
		return
	}
	l.startCtl(s, start, after)
}

func (l *loop) startCtl(s uint32, start func(slot uint32) ucxlib.Status, after func(ucxlib.Status)) {
	st := start(s)
	if st == ucxlib.InProgress {
		l.slots[s].fn = after
		return
	}
	l.freeSlot(s)
	if after != nil {
		after(st)
	}
}

func (l *loop) retryCtl() {
	for len(l.ctlq) > 0 && l.ctlq[0]() {
		l.ctlq = l.ctlq[1:]
	}
}

// send sends a control message on c.
func (l *loop) send(c *conn, m message, after func(ucxlib.Status)) {
	buf := m.encode()
	l.ctl(func(s uint32) ucxlib.Status {
		if c.usable() != nil {
			return ucxlib.ErrNotConnected
		}
		return l.w.SendMessage(s, c.ep, buf)
	}, after)
}

// flush flushes c: after runs once everything issued on it before is
// complete at the remote side.
func (l *loop) flush(c *conn, after func(ucxlib.Status)) {
	l.ctl(func(s uint32) ucxlib.Status {
		if c.usable() != nil {
			return ucxlib.ErrNotConnected
		}
		ops := []ucxlib.Op{{Kind: ucxlib.OpFlush, Slot: s, EP: c.ep}}
		l.w.Post(ops)
		return ops[0].Status
	}, after)
}
