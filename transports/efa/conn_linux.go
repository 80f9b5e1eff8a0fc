//go:build linux && cgo

package efa

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unicode"

	"go.uber.org/zap"

	"github.com/kvconnect/kvconnect/plugins"
)

// slotRef is what an op context stands for: a chunk of a batch, or a
// probe.
type slotRef struct {
	b  *batch
	c  int32
	pr *probe
}

// peerConn is a peer as the progress thread knows it.
type peerConn struct {
	name         string
	av           *avEntry
	rawKeys      []uint64
	status       regionKey // the peer's status table
	statusRKey   uint64
	posted       int // contexts posted to this peer (chunks and probes)
	probes       int // probes queued or posted
	closed       bool
	released     bool
	lastProgress time.Time
	lastError    time.Time // when an operation to the peer last completed with an error
}

type avEntry struct {
	key  string
	addr uint64
	refs int
	dead bool // the peer was a transport of this process and closed
	// posted counts contexts posted to this address; drained is closed
	// when it reaches 0 after the peer started closing.
	posted  int
	drained chan struct{}
}

// addPosted accounts for n contexts posted to conn (negative: completed).
func (c *peerConn) addPosted(n int) {
	c.posted += n
	if av := c.av; av != nil {
		av.posted += n
		if av.posted == 0 && av.drained != nil {
			close(av.drained)
			av.drained = nil
		}
	}
}

// dead says the peer is a transport of this process that closed: nothing
// may be posted to it any more.
func (c *peerConn) dead() bool { return c.av != nil && c.av.dead }

// checkAddr validates a peer's address against ours before it goes to
// fi_av_insert, which trusts its length and format.
func (f *fabric) checkAddr(name string, ep endpoint) error {
	if ep.Provider != f.info.Provider || ep.AddrFormat != f.info.AddrFormat {
		return fmt.Errorf("efa: peer %q runs provider %q (address format %d) but this node runs %q (address format %d); both ends must use the same transports.efa.provider: %w",
			name, ep.Provider, ep.AddrFormat, f.info.Provider, f.info.AddrFormat, plugins.ErrNotSupported)
	}
	if f.info.AddrFormat == fiAddrStr {
		for _, r := range string(ep.Addr) {
			if r == 0 || r > unicode.MaxASCII || !unicode.IsPrint(r) {
				return fmt.Errorf("efa: peer %q address is not a printable string: %w", name, plugins.ErrInvalidArgument)
			}
		}
		return nil
	}
	if len(ep.Addr) != len(f.self) {
		return fmt.Errorf("efa: peer %q address is %d bytes, this provider's are %d: %w", name, len(ep.Addr), len(f.self), plugins.ErrInvalidArgument)
	}
	return nil
}

// connect puts the peer's address in the address vector (once per
// address) and maps its raw keys.
func (f *fabric) connect(ctx context.Context, name string, ep endpoint, p *peer) (*peerConn, error) {
	if err := f.checkAddr(name, ep); err != nil {
		return nil, err
	}
	slots := uint32(ep.Status.Size / 8)
	for _, r := range p.regions.Values() {
		if r.key.Slot >= slots || r.key.Token == 0 {
			return nil, fmt.Errorf("efa: peer %q region %d: status slot %d outside its table of %d: %w", name, r.id, r.key.Slot, slots, plugins.ErrProtocol)
		}
	}
	conn := &peerConn{name: name, status: ep.Status, statusRKey: ep.Status.Key}
	err := f.do(func() error {
		av := f.avs[string(ep.Addr)]
		if av == nil {
			addr, rc := f.c.avInsert(ep.Addr)
			if rc != 0 {
				return fmt.Errorf("efa: fi_av_insert of peer %q (%s): %s (%s %d): %w", name, f.c.straddr(ep.Addr), fiStrerror(rc), fiName(rc), rc, plugins.ErrPeerUnreachable)
			}
			av = &avEntry{key: string(ep.Addr), addr: addr}
			f.avs[av.key] = av
		}
		av.refs++
		conn.av = av
		mapRaw := func(what string, k regionKey) (uint64, error) {
			key, rc := f.c.mapRaw(k.Base, k.Raw)
			if rc != 0 {
				return 0, fmt.Errorf("efa: fi_mr_map_raw for peer %q %s: %s (%s %d): %w", name, what, fiStrerror(rc), fiName(rc), rc, plugins.ErrProtocol)
			}
			conn.rawKeys = append(conn.rawKeys, key)
			return key, nil
		}
		if ep.Status.Flags&keyFlagRaw != 0 {
			key, err := mapRaw("status table", ep.Status)
			if err != nil {
				f.releaseConn(conn)
				return err
			}
			conn.statusRKey = key
		}
		for _, r := range p.regions.Values() {
			if r.key.Flags&keyFlagRaw == 0 {
				continue
			}
			key, err := mapRaw(fmt.Sprintf("region %d", r.id), r.key)
			if err != nil {
				f.releaseConn(conn)
				return err
			}
			r.rkey = key
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return conn, nil
}

// releaseConn drops conn's hold on its address and raw keys (progress
// thread).
func (f *fabric) releaseConn(conn *peerConn) {
	if conn.released {
		return
	}
	conn.released = true
	for _, k := range conn.rawKeys {
		f.c.unmapKey(k)
	}
	conn.rawKeys = nil
	if av := conn.av; av != nil {
		av.refs--
		if av.refs == 0 && !av.dead {
			delete(f.avs, av.key)
			if rc := f.c.avRemove(av.addr); rc != 0 {
				f.log.Debug("efa: fi_av_remove", zap.String("peer", conn.name), zap.String("error", fiStrerror(rc)))
			}
		}
	}
}

// disconnect fails conn's ops and releases it once nothing of it is posted.
func (f *fabric) disconnect(ctx context.Context, conn *peerConn) error {
	err := f.do(func() error {
		conn.closed = true
		cerr := fmt.Errorf("efa: peer %s disconnected: %w", conn.name, plugins.ErrClosed)
		for b := range f.active {
			if b.conn == conn {
				b.failUnreported(cerr)
				delete(f.active, b)
			}
		}
		f.maybeRelease(conn)
		return nil
	})
	if err != nil && !errors.Is(err, plugins.ErrClosed) {
		return err
	}
	return nil
}

// localPeerClosed stops all use of addr, the address of a transport of
// this process that is closing: its ops fail, nothing more is posted to it
// and its address stays in the AV (removing it could touch the peer's
// memory too). It returns a channel closed once nothing posted to the peer
// is outstanding (nil if nothing is): the peer must not free its memory
// before, since completing those operations touches it.
func (f *fabric) localPeerClosed(addr, provider string) chan struct{} {
	if provider != f.info.Provider {
		return nil
	}
	av := f.avs[addr]
	if av == nil {
		return nil
	}
	av.dead = true
	for b := range f.active {
		if b.conn.av == av {
			b.failUnreported(fmt.Errorf("efa: peer %s closed: %w", b.conn.name, plugins.ErrPeerUnreachable))
			delete(f.active, b)
		}
	}
	for _, p := range f.probeQueue {
		if p.key.conn.av == av {
			p.notBefore = time.Time{} // resolved as failed by postProbes
		}
	}
	if av.posted == 0 {
		return nil
	}
	av.drained = make(chan struct{})
	return av.drained
}
