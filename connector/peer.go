package connector

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"go.uber.org/zap"

	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/plugins/regions"
)

// Peer is an opened remote node. When the connection to it is lost (the
// peer restarted, its transport moved), the next Submit fetches its
// descriptor again and reconnects, so a Peer stays usable across peer
// restarts. It is safe for concurrent use: many batches may be in flight
// on one Peer.
type Peer struct {
	c       *Connector
	session string

	refresh chan struct{} // cap 1, held by the one reconnect under way: waiting for it honours ctx

	mu      sync.Mutex
	desc    SegmentDescriptor
	buffers *regions.Index[BufferDescriptor] // desc.Buffers, for lookups
	at      *activeTransport
	id      plugins.PeerID
	stale   bool          // the connection was lost; reconnect before the next batch
	suspect *suspectState // the peer did not answer in time; see suspect.go
	closed  bool
}

// link is a snapshot of how a peer is reached.
type link struct {
	at      *activeTransport
	id      plugins.PeerID
	desc    *SegmentDescriptor
	buffers *regions.Index[BufferDescriptor]
}

func (p *Peer) link() (link, bool, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return link{at: p.at, id: p.id, desc: &p.desc, buffers: p.buffers}, p.stale, p.closed
}

// Session is the peer's session id.
func (p *Peer) Session() string { return p.session }

// Transport is the transport used to reach the peer.
func (p *Peer) Transport() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.at.name
}

// RemoteRegion is a region the peer published.
type RemoteRegion struct {
	ID   RegionID
	Addr uint64
	Len  uint64
}

// Regions lists the regions the peer published when it was last
// (re)connected.
func (p *Peer) Regions() []RemoteRegion {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]RemoteRegion, len(p.desc.Buffers))
	for i, b := range p.desc.Buffers {
		out[i] = RemoteRegion{ID: RegionID(b.ID), Addr: b.Addr, Len: b.Length}
	}
	return out
}

func (p *Peer) markClosed() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
}

// markStale notes that the link (at, id) broke; the next Submit
// reconnects. A link already replaced is left alone.
func (p *Peer) markStale(at *activeTransport, id plugins.PeerID, cause error) {
	p.mu.Lock()
	if p.stale || p.closed || p.at != at || p.id != id {
		p.mu.Unlock()
		return
	}
	p.stale = true
	p.mu.Unlock()
	p.c.log.Warn("lost the connection to a peer; the next batch reconnects", zap.String("peer", p.session), zap.String("transport", at.name), zap.Error(cause))
	// Bounded: it runs on a batch's path, and a wedged plugin must not
	// hold the batch past its own deadline for long.
	ctx, cancel := context.WithTimeout(context.Background(), p.c.cfg.ConnectTimeout)
	defer cancel()
	at.tr.Disconnect(ctx, id)
}

// ensure returns a live link, reconnecting a stale peer first.
func (p *Peer) ensure(ctx context.Context) (link, error) {
	l, stale, closed := p.link()
	if closed {
		return l, fmt.Errorf("connector: peer %s: %w", p.session, ErrClosed)
	}
	// A transport whose plugin crashed (and was restarted, or is being
	// restarted) needs a new link too.
	if !stale && p.c.usableOn(l.at) == nil {
		return l, nil
	}
	select {
	case p.refresh <- struct{}{}: // free: taken whatever ctx
	default:
		select {
		case p.refresh <- struct{}{}:
		case <-ctx.Done():
			return l, fmt.Errorf("connector: peer %s: waiting for the reconnect under way: %w", p.session, contextError(ctx.Err()))
		}
	}
	defer func() { <-p.refresh }()
	if l, stale, closed = p.link(); closed {
		return l, fmt.Errorf("connector: peer %s: %w", p.session, ErrClosed)
	} else if !stale && p.c.usableOn(l.at) == nil {
		return l, nil
	}
	ctx, cancel := p.c.withTimeout(ctx, p.c.cfg.ConnectTimeout)
	defer cancel()
	d, buffers, at, id, err := p.c.connectPeer(ctx, p.session)
	if err != nil {
		return l, fmt.Errorf("connector: reconnecting to peer %s: %w", p.session, err)
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		at.tr.Disconnect(context.Background(), id)
		return l, fmt.Errorf("connector: peer %s: %w", p.session, ErrClosed)
	}
	prev := p.at.name
	p.desc, p.buffers, p.at, p.id, p.stale = d, buffers, at, id, false
	l = link{at: at, id: id, desc: &p.desc, buffers: p.buffers}
	p.mu.Unlock()
	if at.name != prev {
		p.c.log.Warn("reconnected to peer over another transport", zap.String("peer", p.session),
			zap.String("transport", at.name), zap.String("was", prev))
	} else {
		p.c.log.Info("reconnected to peer", zap.String("peer", p.session), zap.String("transport", at.name))
	}
	return l, nil
}

// Open fetches a peer's segment descriptor over the P2P handshake and
// connects to it with a transport both sides have up. Opening the same
// session again returns the open peer.
func (c *Connector) Open(ctx context.Context, session string) (*Peer, error) {
	if err := c.usable(); err != nil {
		return nil, err
	}
	if err := c.validSession(session); err != nil {
		return nil, err
	}
	c.mu.Lock()
	if p, ok := c.peers[session]; ok {
		c.mu.Unlock()
		return p, nil
	}
	c.mu.Unlock()

	ctx, cancel := c.withTimeout(ctx, c.cfg.ConnectTimeout)
	defer cancel()
	d, buffers, at, id, err := c.connectPeer(ctx, session)
	if err != nil {
		return nil, err
	}
	p := &Peer{c: c, session: session, desc: d, buffers: buffers, at: at, id: id, refresh: make(chan struct{}, 1)}
	c.mu.Lock()
	if old, ok := c.peers[session]; ok { // lost a race with another Open
		c.mu.Unlock()
		at.tr.Disconnect(context.Background(), id)
		return old, nil
	}
	if c.closed {
		c.mu.Unlock()
		return nil, fmt.Errorf("connector: %w", ErrClosed)
	}
	c.peers[session] = p
	c.mu.Unlock()
	return p, nil
}

// connectPeer fetches session's descriptor and connects to it over the
// first transport both sides have up.
func (c *Connector) connectPeer(ctx context.Context, session string) (SegmentDescriptor, *regions.Index[BufferDescriptor], *activeTransport, plugins.PeerID, error) {
	body, release, err := c.fetchDescriptor(ctx, session)
	c.observe().Handshake(err)
	if err != nil {
		return SegmentDescriptor{}, nil, nil, 0, err
	}
	if string(body) == "null\n" || string(body) == "null" {
		release()
		// A Mooncake node answers null while it has no segment yet.
		return SegmentDescriptor{}, nil, nil, 0, fmt.Errorf("connector: peer %s has no segment yet (it answered null: a Mooncake node that has registered no memory, or is still starting): %w", session, ErrPeerUnreachable)
	}
	d, buffers, err := decodeDescriptor(body)
	release()
	if err != nil {
		return d, nil, nil, 0, fmt.Errorf("connector: peer %s: %w", session, err)
	}
	hostHint := session // where a Mooncake descriptor's data port is
	if d.IsMooncake() && c.meta != nil {
		if hostHint, err = c.rpcAddress(ctx, session); err != nil {
			return d, nil, nil, 0, err
		}
	}
	theirs := d.transports(hostHint)
	if d.IsMooncake() && len(theirs) == 0 {
		return d, nil, nil, 0, d.mooncakeNotReachable(session)
	}
	if d.IsMooncake() && !c.mooncake() {
		return d, nil, nil, 0, fmt.Errorf("connector: peer %s is a Mooncake Transfer Engine node, and mooncake_interop is off on this node: %w", session, ErrNoCommonTransport)
	}
	if !d.IsMooncake() && len(theirs) == 0 {
		return d, nil, nil, 0, fmt.Errorf("connector: peer %s has no transport up right now (its transport plugin may be restarting after a crash): %w", session, ErrPeerUnreachable)
	}
	at, ep := c.pickTransport(&d, theirs)
	if at == nil {
		var down error
		var ours []string
		for _, t := range c.active() {
			if err := c.usableOn(t); err != nil {
				down = err
				continue
			}
			ours = append(ours, t.name)
		}
		if len(ours) == 0 && down != nil {
			return d, nil, nil, 0, fmt.Errorf("connector: no transport of this node is up to reach %s: %w", session, down)
		}
		names := make([]string, len(theirs))
		for i, t := range theirs {
			names[i] = t.Name
		}
		return d, nil, nil, 0, fmt.Errorf("connector: peer %s has transports [%s] up, this node has [%s]: start both with a common protocol, or let them fall back to one both have (e.g. fallback: [tcp]) (Mooncake's NotSupportedTransport): %w",
			session, strings.Join(names, ", "), strings.Join(ours, ", "), ErrNoCommonTransport)
	}
	info := plugins.PeerInfo{Name: session, Endpoint: ep.Endpoint}
	for _, b := range d.Buffers {
		info.Regions = append(info.Regions, plugins.RemoteRegion{ID: RegionID(b.ID), Addr: b.Addr, Size: b.Length, Key: b.Keys[at.name]})
	}
	id, err := at.tr.Connect(ctx, info)
	if err != nil {
		return d, nil, nil, 0, fmt.Errorf("connector: connecting to %s over %s: %w", session, at.name, err)
	}
	if d.IsMooncake() {
		c.observe().MooncakePeerOpened()
	}
	return d, buffers, at, id, nil
}

// Close disconnects the peer; its ops in flight fail.
func (p *Peer) Close(ctx context.Context) error {
	c := p.c
	c.mu.Lock()
	if c.peers[p.session] == p {
		delete(c.peers, p.session)
	}
	c.mu.Unlock()
	p.mu.Lock()
	already, stale, at, id := p.closed, p.stale, p.at, p.id
	p.closed = true
	p.mu.Unlock()
	if already || stale {
		return nil
	}
	if err := at.tr.Disconnect(ctx, id); err != nil && c.usableOn(at) == nil {
		return fmt.Errorf("connector: closing peer %s: %w", p.session, err)
	}
	return nil
}

// pickTransport returns the first transport in this node's preference
// order that the peer has up too, and the peer's endpoint for it. A
// transport that only reaches this host (shared-memory lanes) is chosen
// only for a peer on this host.
func (c *Connector) pickTransport(d *SegmentDescriptor, theirs []TransportEndpoint) (*activeTransport, *TransportEndpoint) {
	sameHost := c.hostID != "" && d.KVConnect != nil && d.KVConnect.HostID == c.hostID
	for _, at := range c.active() {
		if c.usableOn(at) != nil {
			continue
		}
		if at.info.Capabilities&plugins.CapSameHostOnly != 0 && !sameHost {
			continue
		}
		for i := range theirs {
			if theirs[i].Name == at.name {
				return at, &theirs[i]
			}
		}
	}
	return nil, nil
}

// lostPeer reports whether a batch outcome means the link to the peer is
// gone (as opposed to ops the peer refused).
func lostPeer(batchErr error, results []OpResult) error {
	if errors.Is(batchErr, ErrPeerUnreachable) || errors.Is(batchErr, ErrUnknownPeer) {
		return batchErr
	}
	for _, r := range results {
		if errors.Is(r.Err, ErrPeerUnreachable) {
			return r.Err
		}
	}
	return nil
}
