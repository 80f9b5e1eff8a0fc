package connector

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/kvconnect/kvconnect/plugins"
)

// Peer is an opened remote node.
type Peer struct {
	c       *Connector
	session string
	desc    SegmentDescriptor
	at      *activeTransport
	id      plugins.PeerID

	mu     sync.Mutex
	closed bool
}

// Session is the peer's session id.
func (p *Peer) Session() string { return p.session }

// Transport is the transport used to reach the peer.
func (p *Peer) Transport() string { return p.at.name }

// RemoteRegion is a region the peer published.
type RemoteRegion struct {
	ID   RegionID
	Addr uint64
	Len  uint64
}

// Regions lists the regions the peer had published when it was opened.
func (p *Peer) Regions() []RemoteRegion {
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

func (p *Peer) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

// Open fetches a peer's segment descriptor over the P2P handshake and
// connects to it with a transport both sides have up. Opening the same
// session again returns the open peer.
func (c *Connector) Open(ctx context.Context, session string) (*Peer, error) {
	if err := c.usable(); err != nil {
		return nil, err
	}
	if _, _, err := splitSession(session); err != nil {
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
	body, err := request(ctx, session, frameMetadata, []byte("{}"), c.cfg.MaxHandshakeFrame)
	if err != nil {
		return nil, err
	}
	d, err := decodeDescriptor(body)
	if err != nil {
		return nil, fmt.Errorf("connector: peer %s: %w", session, err)
	}
	sort.Slice(d.Buffers, func(i, j int) bool { return d.Buffers[i].Addr < d.Buffers[j].Addr })
	at, ep := c.pickTransport(&d)
	if at == nil {
		theirs := make([]string, len(d.Transports))
		for i, t := range d.Transports {
			theirs[i] = t.Name
		}
		ours := make([]string, 0, len(c.transports))
		for _, t := range c.transports {
			ours = append(ours, t.name)
		}
		return nil, fmt.Errorf("connector: peer %s has transports [%s] up, this node has [%s]: start both with a common protocol, or let them fall back to one both have (e.g. fallback: [tcp]) (Mooncake's NotSupportedTransport): %w",
			session, strings.Join(theirs, ", "), strings.Join(ours, ", "), ErrNoCommonTransport)
	}
	info := plugins.PeerInfo{Name: session, Endpoint: ep.Endpoint}
	for _, b := range d.Buffers {
		info.Regions = append(info.Regions, plugins.RemoteRegion{ID: RegionID(b.ID), Addr: b.Addr, Size: b.Length, Key: b.Keys[at.name]})
	}
	id, err := at.tr.Connect(ctx, info)
	if err != nil {
		return nil, fmt.Errorf("connector: connecting to %s over %s: %w", session, at.name, err)
	}
	p := &Peer{c: c, session: session, desc: d, at: at, id: id}
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

// Close disconnects the peer; its ops in flight fail.
func (p *Peer) Close(ctx context.Context) error {
	c := p.c
	c.mu.Lock()
	if c.peers[p.session] == p {
		delete(c.peers, p.session)
	}
	c.mu.Unlock()
	p.mu.Lock()
	already := p.closed
	p.closed = true
	p.mu.Unlock()
	if already {
		return nil
	}
	if err := p.at.tr.Disconnect(ctx, p.id); err != nil && c.usableOn(p.at) == nil {
		return fmt.Errorf("connector: closing peer %s: %w", p.session, err)
	}
	return nil
}

// pickTransport returns the first transport in this node's preference
// order that the peer has up too, and the peer's endpoint for it.
func (c *Connector) pickTransport(d *SegmentDescriptor) (*activeTransport, *TransportEndpoint) {
	for _, at := range c.transports {
		if c.usableOn(at) != nil {
			continue
		}
		for i := range d.Transports {
			if d.Transports[i].Name == at.name {
				return at, &d.Transports[i]
			}
		}
	}
	return nil, nil
}
