package ucxpath

import (
	"cmp"
	"fmt"
	"slices"

	"go.uber.org/zap"

	ucxlib "github.com/kvconnect/kvconnect/internal/ucx"
	"github.com/kvconnect/kvconnect/plugins"
)

func (l *loop) handleMessage(b []byte) {
	m, err := decodeMessage(b)
	if err != nil {
		l.log.Warn(l.name+": dropping a control message", zap.Error(err))
		return
	}
	switch m.typ {
	case msgHello:
		l.onHello(m)
	case msgWelcome:
		p := l.peers[m.client]
		if p == nil || p.welcomed {
			return
		}
		for _, r := range m.regions {
			p.live[r] = true
		}
		if m.more {
			return
		}
		for _, rr := range p.remote.Values() {
			if !p.live[liveRegion{id: rr.id, token: rr.token}] {
				rr.revoked = fmt.Errorf("%s: region %d of peer %s is no longer registered there (stale descriptor): %w", l.name, rr.id, p.name, plugins.ErrUnknownRegion)
			}
		}
		p.live = nil
		p.welcomed = true
		p.welcome <- nil
	case msgRevoke:
		l.onRevoke(m)
	case msgAck:
		if rv := l.revokes[m.seq]; rv != nil {
			if cl := rv.waiting[m.client]; cl != nil {
				delete(rv.waiting, m.client)
				l.checkRevoke(rv)
			}
		}
	case msgBye:
		if cl := l.clients[m.client]; cl != nil {
			l.dropClient(cl)
		}
	}
}

func (l *loop) onHello(m message) {
	if l.closing {
		return
	}
	if old := l.clients[m.client]; old != nil {
		l.dropClient(old)
	}
	c, err := l.connTo(m.worker, m.where)
	if err != nil {
		l.log.Warn(l.name+": cannot reach a peer that connected", zap.Error(err))
		return
	}
	cl := &client{id: m.client, conn: c}
	l.clients[cl.id] = cl
	c.clients[cl] = struct{}{}
	live := make([]liveRegion, 0, len(l.mems))
	for _, lm := range l.mems {
		live = append(live, liveRegion{id: lm.id, token: lm.token})
	}
	slices.SortFunc(live, func(a, b liveRegion) int { return cmp.Compare(a.id, b.id) })
	for {
		n := min(len(live), maxRegionsPerMessage)
		l.send(c, message{typ: msgWelcome, client: cl.id, regions: live[:n], more: n < len(live)}, nil)
		live = live[n:]
		if len(live) == 0 {
			break
		}
	}
}

// onRevoke: the owner revokes regions (or all of them: it is closing).
// Mark them, flush the endpoint so nothing issued before is still in
// flight, then acknowledge.
func (l *loop) onRevoke(m message) {
	p := l.peers[m.client]
	if p == nil {
		return
	}
	if m.reason == revokeClosing {
		err := fmt.Errorf("%s: peer %s closed: %w", l.name, p.name, plugins.ErrPeerUnreachable)
		if p.err == nil {
			p.err = err
		}
		for _, rr := range p.remote.Values() {
			rr.revoked = err
		}
	} else {
		for _, r := range m.regions {
			if rr, ok := p.remote.Lookup(uint64(r.id)); ok && rr.token == r.token {
				rr.revoked = fmt.Errorf("%s: region %d of peer %s was deregistered: %w", l.name, r.id, p.name, plugins.ErrUnknownRegion)
			}
		}
	}
	l.issue() // queued ops to revoked regions fail now
	l.flush(p.conn, func(ucxlib.Status) {
		l.send(p.conn, message{typ: msgAck, client: p.client, seq: m.seq}, nil)
	})
}
