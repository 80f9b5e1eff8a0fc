package simpletcp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/plugins/regions"
)

// peer is a connected peer: one connection, one op at a time.
type peer struct {
	name    string
	addr    string
	regions *regions.Index[plugins.RemoteRegion]

	mu     sync.Mutex // serialises ops; guards broken
	broken error      // set once the connection failed: later ops of the batch fail fast

	connMu sync.Mutex // guards nc and closed; never held while waiting
	nc     net.Conn
	closed error // set by close: no more ops, no redial
}

// conn returns the current connection, or why there is none.
func (p *peer) conn() (net.Conn, error) {
	p.connMu.Lock()
	defer p.connMu.Unlock()
	return p.nc, p.closed
}

// close ends the peer: its connection closes at once (an op in flight
// fails) and later ops fail with err.
func (p *peer) close(err error) {
	p.connMu.Lock()
	defer p.connMu.Unlock()
	if p.closed == nil {
		p.closed = err
	}
	p.nc.Close()
}

// Connect dials the peer's endpoint and indexes its regions.
func (t *Transport) Connect(ctx context.Context, info plugins.PeerInfo) (plugins.PeerID, error) {
	if err := t.guard.Up(Name); err != nil {
		return 0, err
	}
	x, err := regions.NewIndex(info.Regions, func(r plugins.RemoteRegion) regions.Span {
		return regions.Span{ID: uint64(r.ID), Addr: r.Addr, Size: r.Size}
	})
	if err != nil {
		return 0, fmt.Errorf("%s: peer %s published a bad region list: %v: %w", Name, info.Name, err, plugins.ErrProtocol)
	}
	d := net.Dialer{Timeout: t.dial}
	nc, err := d.DialContext(ctx, "tcp", string(info.Endpoint))
	if err != nil {
		return 0, fmt.Errorf("%s: dial peer %s at %q: %v: %w", Name, info.Name, info.Endpoint, err, plugins.ErrPeerUnreachable)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.guard.Up(Name); err != nil {
		nc.Close()
		return 0, err
	}
	t.nextID++
	t.peers[t.nextID] = &peer{name: info.Name, addr: string(info.Endpoint), regions: x, nc: nc}
	return t.nextID, nil
}

// Disconnect closes a peer; its ops in flight fail.
func (t *Transport) Disconnect(_ context.Context, id plugins.PeerID) error {
	if err := t.guard.Up(Name); err != nil {
		return err
	}
	t.mu.Lock()
	p, ok := t.peers[id]
	delete(t.peers, id)
	t.mu.Unlock()
	if !ok {
		return fmt.Errorf("%s: peer %d: %w", Name, id, plugins.ErrUnknownPeer)
	}
	p.close(fmt.Errorf("%s: peer %s disconnected: %w", Name, p.name, plugins.ErrClosed))
	return nil
}

// Transfer runs the ops one after another on the peer's connection.
func (t *Transport) Transfer(ctx context.Context, id plugins.PeerID, ops []plugins.Op, results []plugins.OpResult) error {
	if err := t.guard.Up(Name); err != nil {
		plugins.FillResults(results, err)
		return err
	}
	t.mu.Lock()
	p, ok := t.peers[id]
	t.mu.Unlock()
	if !ok {
		err := fmt.Errorf("%s: peer %d: %w", Name, id, plugins.ErrUnknownPeer)
		plugins.FillResults(results, err)
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	// A connection that broke in an earlier batch (a timeout, a peer that
	// restarted) is dialed again; within a batch, ops fail fast instead.
	if p.broken != nil {
		d := net.Dialer{Timeout: t.dial}
		if nc, err := d.DialContext(ctx, "tcp", p.addr); err == nil {
			p.connMu.Lock()
			if p.closed == nil {
				p.nc, p.broken = nc, nil
			} else {
				nc.Close()
			}
			p.connMu.Unlock()
		}
	}
	nc, closed := p.conn()
	if closed != nil {
		plugins.FillResults(results, closed)
		return closed
	}
	// Ending ctx interrupts the op on the wire. Once that has run, the
	// deadline it set stays on the connection, and the op it cut left the
	// stream mid-request: the connection is marked broken, so the next
	// batch dials a new one instead of failing on a stale deadline.
	stop := context.AfterFunc(ctx, func() { nc.SetDeadline(time.Now()) })
	for i := range ops {
		results[i].Err = t.op(ctx, p, nc, &ops[i])
	}
	if !stop() && p.broken == nil {
		p.broken = fmt.Errorf("%s: peer %s: a batch given up cut the connection: %w", Name, p.name, plugins.ErrPeerUnreachable)
		nc.Close()
	}
	return nil
}

// op runs one op on nc; p.mu is held.
func (t *Transport) op(ctx context.Context, p *peer, nc net.Conn, op *plugins.Op) error {
	if err := ctx.Err(); err != nil {
		return plugins.ContextError(err)
	}
	if p.broken != nil {
		return p.broken
	}
	if op.Kind != plugins.OpRead && op.Kind != plugins.OpWrite {
		return fmt.Errorf("%s: op kind %d: must be READ or WRITE: %w", Name, op.Kind, plugins.ErrInvalidArgument)
	}
	if op.Length == 0 || op.Length > maxLength {
		return fmt.Errorf("%s: op length %d: must be between 1 and %d: %w", Name, op.Length, maxLength, plugins.ErrInvalidArgument)
	}
	// The initiator checks the remote range too, so a refused op never
	// goes on the wire.
	if _, _, _, err := p.regions.Resolve(uint64(op.RemoteRegion), op.RemoteOffset, op.Length); err != nil {
		return fmt.Errorf("%s: peer %s: %w", Name, p.name, err)
	}
	e, mem, err := t.regions.Resolve(uint64(op.LocalRegion), op.LocalOffset, op.Length)
	if err != nil {
		if t.guard.Closed() {
			// Close removes every region: an op it caught before it
			// began failed because the transport closed.
			return fmt.Errorf("%s: transport closed: %w", Name, plugins.ErrClosed)
		}
		return fmt.Errorf("%s: local side: %w", Name, err)
	}
	defer e.Release()
	var hb [headerSize]byte
	header{op: op.Kind, region: uint64(op.RemoteRegion), offset: op.RemoteOffset, length: op.Length}.encode(&hb)
	out := net.Buffers{hb[:]}
	if op.Kind == plugins.OpWrite {
		out = append(out, mem)
	}
	if _, err := out.WriteTo(nc); err != nil {
		return t.broke(ctx, p, nc, err)
	}
	var st [1]byte
	if _, err := io.ReadFull(nc, st[:]); err != nil {
		return t.broke(ctx, p, nc, err)
	}
	switch st[0] {
	case statusOK:
	case statusOutOfBounds:
		return fmt.Errorf("%s: peer %s refused %s: %w", Name, p.name, op.Kind, plugins.ErrOutOfBounds)
	case statusUnknownRegion:
		return fmt.Errorf("%s: peer %s refused %s: %w", Name, p.name, op.Kind, plugins.ErrUnknownRegion)
	default:
		return t.broke(ctx, p, nc, fmt.Errorf("status %d: %w", st[0], plugins.ErrProtocol))
	}
	if op.Kind == plugins.OpRead {
		if _, err := io.ReadFull(nc, mem); err != nil {
			return t.broke(ctx, p, nc, err)
		}
	}
	return nil
}

// broke marks p's connection broken by err and returns the op's error.
func (t *Transport) broke(ctx context.Context, p *peer, nc net.Conn, err error) error {
	_, closed := p.conn()
	switch {
	case closed != nil:
		err = closed
	case ctx.Err() != nil:
		err = fmt.Errorf("%s: op to peer %s: %w", Name, p.name, plugins.ContextError(ctx.Err()))
	case t.guard.Closed():
		err = fmt.Errorf("%s: transport closed: %w", Name, plugins.ErrClosed)
	case errors.Is(err, plugins.ErrProtocol) || errors.Is(err, plugins.ErrClosed):
	default:
		err = fmt.Errorf("%s: connection to peer %s broke: %v: %w", Name, p.name, err, plugins.ErrPeerUnreachable)
	}
	if p.broken == nil {
		p.broken = err
	}
	nc.Close()
	return err
}
