package tcp

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/plugins/regions"
	"github.com/kvconnect/kvconnect/transports/tcp/internal/mcwire"
)

// MooncakeEndpoint is the PeerInfo.Endpoint of a Mooncake Transfer Engine
// peer: "mooncake/<protocol version>@<host>:<tcp_data_port>". The
// connector builds it from the peer's Mooncake segment descriptor; the
// tcp transport then speaks Mooncake's TCP data protocol to it.
func MooncakeEndpoint(host string, dataPort, protoVersion int) []byte {
	return []byte(fmt.Sprintf("mooncake/%d@%s", protoVersion, net.JoinHostPort(host, strconv.Itoa(dataPort))))
}

// parseMooncakeEndpoint splits a MooncakeEndpoint; ok is false for any
// other endpoint.
func parseMooncakeEndpoint(ep []byte) (addr string, v2 bool, ok bool, err error) {
	rest, found := strings.CutPrefix(string(ep), "mooncake/")
	if !found {
		return "", false, false, nil
	}
	ver, addr, found := strings.Cut(rest, "@")
	v, verr := strconv.Atoi(ver)
	if !found || verr != nil || v < 1 {
		return "", false, true, fmt.Errorf("tcp: Mooncake endpoint %q: want mooncake/<version>@host:port: %w", ep, plugins.ErrInvalidArgument)
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return "", false, true, fmt.Errorf("tcp: Mooncake endpoint %q: %v: %w", ep, err, plugins.ErrInvalidArgument)
	}
	return addr, v >= 2, true, nil
}

// mcPeer is a Mooncake node reached over its TCP data protocol: a pool of
// lanes (connections), each carrying one request at a time, since a
// Mooncake server answers the requests of a connection one after another.
type mcPeer struct {
	t       *Transport
	id      plugins.PeerID
	name    string
	addr    string
	v2      bool
	regions *regions.Index[plugins.RemoteRegion]
	lanes   chan *mcLane // idle lanes; nil entries are not connected yet

	mu        sync.Mutex
	busy      map[*mcLane]struct{} // lanes in use, closed by close()
	closed    error
	dialErr   error
	dialErrAt time.Time
}

type mcLane struct {
	nc net.Conn
	br *bufio.Reader
}

func (t *Transport) connectMooncake(ctx context.Context, info plugins.PeerInfo, addr string, v2 bool) (plugins.PeerID, error) {
	x, err := regions.NewIndex(info.Regions, func(r plugins.RemoteRegion) regions.Span {
		return regions.Span{ID: uint64(r.ID), Addr: r.Addr, Size: r.Size}
	})
	if err != nil {
		return 0, fmt.Errorf("tcp: Mooncake peer %s published a bad buffer list: %v: %w", info.Name, err, plugins.ErrProtocol)
	}
	t.mu.Lock()
	if err := t.guard.Up(Name); err != nil {
		t.mu.Unlock()
		return 0, err
	}
	t.nextID++
	if t.opts.MooncakeProto == 1 {
		v2 = false
	}
	p := &mcPeer{t: t, id: t.nextID, name: info.Name, addr: addr, v2: v2, regions: x,
		lanes: make(chan *mcLane, t.opts.MooncakeLanes), busy: map[*mcLane]struct{}{}}
	t.mu.Unlock()
	for i := 0; i < t.opts.MooncakeLanes; i++ {
		p.lanes <- nil
	}
	// One lane up front proves the data port answers.
	l, err := p.dial(ctx)
	if err != nil {
		return 0, err
	}
	<-p.lanes
	p.lanes <- l
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.guard.Up(Name); err != nil {
		p.close(err)
		return 0, err
	}
	t.mcpeers[p.id] = p
	return p.id, nil
}

func (p *mcPeer) dial(ctx context.Context) (*mcLane, error) {
	p.mu.Lock()
	if p.closed != nil {
		err := p.closed
		p.mu.Unlock()
		return nil, err
	}
	if p.dialErr != nil && time.Since(p.dialErrAt) < redialBackoff {
		err := p.dialErr
		p.mu.Unlock()
		return nil, err
	}
	p.mu.Unlock()
	d := net.Dialer{Timeout: time.Duration(p.t.opts.ConnectTimeout), KeepAlive: 15 * time.Second}
	nc, err := d.DialContext(ctx, "tcp", p.addr)
	if err != nil {
		if ctx.Err() != nil {
			// The caller gave up: that says nothing of the peer, and must
			// not fail other callers' dials for redialBackoff.
			return nil, fmt.Errorf("tcp: dial Mooncake peer %s at %s: %w", p.name, p.addr, plugins.ContextError(ctx.Err()))
		}
		err = fmt.Errorf("tcp: dial Mooncake peer %s at %s: %v: %w", p.name, p.addr, err, plugins.ErrPeerUnreachable)
		p.mu.Lock()
		p.dialErr, p.dialErrAt = err, time.Now()
		p.mu.Unlock()
		return nil, err
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	return &mcLane{nc: nc, br: bufio.NewReaderSize(nc, readBufferSize)}, nil
}

// acquire takes an idle lane, dialing it if it is not connected.
func (p *mcPeer) acquire(ctx context.Context) (*mcLane, error) {
	if err := ctx.Err(); err != nil { // a ready lane would win the select half the time
		return nil, fmt.Errorf("tcp: waiting for a lane to Mooncake peer %s: %w", p.name, plugins.ContextError(err))
	}
	var l *mcLane
	select {
	case l = <-p.lanes:
	case <-ctx.Done():
		return nil, fmt.Errorf("tcp: waiting for a lane to Mooncake peer %s: %w", p.name, plugins.ContextError(ctx.Err()))
	}
	if l == nil {
		var err error
		if l, err = p.dial(ctx); err != nil {
			p.lanes <- nil
			return nil, err
		}
	}
	p.mu.Lock()
	if p.closed != nil {
		err := p.closed
		p.mu.Unlock()
		l.nc.Close()
		p.lanes <- nil
		return nil, err
	}
	p.busy[l] = struct{}{}
	p.mu.Unlock()
	return l, nil
}

// release returns a lane; a broken one is reset and comes back
// unconnected. A lane breaks with its request unfinished (a timeout, the
// caller giving up, a cut link), and that request has failed: closing
// the lane resets it, so the kernel drops what the peer has not received
// instead of delivering it later (a link that comes back, a stopped peer
// that resumes). Mooncake's protocol cannot cancel a request the peer
// already received; see docs/RELIABILITY.md.
func (p *mcPeer) release(l *mcLane, broken bool) {
	p.mu.Lock()
	delete(p.busy, l)
	closed := p.closed != nil
	p.mu.Unlock()
	if broken {
		abortOnClose(l.nc)
	}
	if broken || closed {
		l.nc.Close()
		l = nil
	}
	p.lanes <- l
}

func (p *mcPeer) close(err error) {
	p.mu.Lock()
	if p.closed == nil {
		p.closed = err
	}
	busy := make([]*mcLane, 0, len(p.busy))
	for l := range p.busy {
		busy = append(busy, l)
	}
	p.mu.Unlock()
	for _, l := range busy {
		abortOnClose(l.nc) // a request in flight fails at once, and must not land later
		l.nc.Close()
	}
	for {
		select {
		case l := <-p.lanes:
			if l != nil {
				l.nc.Close()
			}
			defer func() { p.lanes <- nil }()
		default:
			return
		}
	}
}

// mcChunk is one request of an op.
type mcChunk struct {
	op    int
	write bool
	addr  uint64 // the peer's absolute address
	mem   []byte
}

// transfer runs a batch against the Mooncake peer: every op is checked
// against the peer's published buffers and the local regions, split into
// chunk_size requests, and spread over the lanes.
func (p *mcPeer) transfer(ctx context.Context, ops []plugins.Op, results []plugins.OpResult) error {
	t := p.t
	chunkSize := uint64(t.opts.ChunkSize)
	var chunks []mcChunk
	entries := make([]*regions.Entry, len(ops))
	defer func() {
		for _, e := range entries {
			if e != nil {
				e.Release()
			}
		}
	}()
	for i := range ops {
		op := &ops[i]
		results[i].Err = nil
		if err := checkOp(op); err != nil {
			results[i].Err = err
			continue
		}
		_, sp, off, err := p.regions.Resolve(uint64(op.RemoteRegion), op.RemoteOffset, op.Length)
		if err != nil {
			results[i].Err = fmt.Errorf("tcp: op %d to Mooncake peer %s: %w", i, p.name, err)
			continue
		}
		e, local, err := t.regions.Resolve(uint64(op.LocalRegion), op.LocalOffset, op.Length)
		if err != nil {
			if t.guard.Closed() {
				// the regions went away because the transport closed
				err = fmt.Errorf("tcp: transport closed: %w", plugins.ErrClosed)
			}
			results[i].Err = fmt.Errorf("tcp: local side of op %d: %w", i, err)
			continue
		}
		entries[i] = e
		for o := uint64(0); o < op.Length; o += chunkSize {
			n := min(chunkSize, op.Length-o)
			chunks = append(chunks, mcChunk{op: i, write: op.Kind == plugins.OpWrite, addr: sp.Addr + off + o, mem: local[o : o+n : o+n]})
		}
	}
	if len(chunks) == 0 {
		return nil
	}
	var mu sync.Mutex // guards results
	var next atomic.Int64
	var wg sync.WaitGroup
	workers := min(len(chunks), t.opts.MooncakeLanes)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				k := int(next.Add(1)) - 1
				if k >= len(chunks) {
					return
				}
				c := &chunks[k]
				mu.Lock()
				failed := results[c.op].Err != nil
				mu.Unlock()
				if failed {
					continue // an earlier chunk of this op failed
				}
				if err := p.request(ctx, c); err != nil {
					mu.Lock()
					if results[c.op].Err == nil {
						results[c.op].Err = fmt.Errorf("tcp: op %d to Mooncake peer %s: %w", c.op, p.name, err)
					}
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("tcp: batch to Mooncake peer %s: %w", p.name, plugins.ContextError(err))
	}
	return nil
}

// request runs one request on a lane.
func (p *mcPeer) request(ctx context.Context, c *mcChunk) error {
	l, err := p.acquire(ctx)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(time.Duration(p.t.opts.OpTimeout))
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	l.nc.SetDeadline(deadline)
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		l.nc.SetDeadline(time.Now())
		close(fired)
	})
	err = p.exchange(ctx, l, c)
	if !stop() && ctx.Done() != nil {
		// The callback runs, or ran: let it finish before the lane's
		// deadline is cleared below and the lane goes to another request,
		// which a late one would cut.
		<-fired
	}
	if err != nil {
		p.release(l, true)
		if ctx.Err() != nil {
			return plugins.ContextError(ctx.Err())
		}
		p.mu.Lock()
		closed := p.closed
		p.mu.Unlock()
		if closed != nil {
			return closed
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return fmt.Errorf("no answer within %v (transports.tcp.op_timeout): %w", time.Duration(p.t.opts.OpTimeout), plugins.ErrTimeout)
		}
		return err
	}
	l.nc.SetDeadline(time.Time{})
	p.release(l, false)
	return nil
}

// exchange sends one request and reads its answer.
func (p *mcPeer) exchange(ctx context.Context, l *mcLane, c *mcChunk) error {
	var hb [mcwire.HeaderSize]byte
	mcwire.Header{Size: uint64(len(c.mem)), Addr: c.addr, Write: c.write, V2: p.v2}.Encode(&hb)
	out := net.Buffers{hb[:]}
	if c.write {
		out = append(out, c.mem)
	}
	// Mooncake's v1 acknowledges no WRITE: a WRITE is done when its bytes
	// left, and a rejected one looks done. So each v1 WRITE is followed,
	// on the same connection, by a 1-byte READ of its last byte: the
	// server serves a connection's requests in order, so the answer means
	// the WRITE was applied (and a READ elsewhere sees it), and a server
	// that rejected the WRITE closes the connection instead.
	barrier := c.write && !p.v2
	var rb [mcwire.HeaderSize]byte
	if barrier {
		mcwire.Header{Size: 1, Addr: c.addr + uint64(len(c.mem)) - 1}.Encode(&rb)
		out = append(out, rb[:])
	}
	if _, err := out.WriteTo(l.nc); err != nil {
		if c.write && p.v2 && ctx.Err() == nil {
			// Mooncake's v2 server rejects a WRITE (a stale descriptor)
			// by sending its status and closing without reading the
			// payload, which resets the connection under this write. The
			// status came before the reset: say what it says.
			var sb [mcwire.StatusSize]byte
			l.nc.SetReadDeadline(time.Now().Add(time.Second))
			if _, rerr := io.ReadFull(l.br, sb[:]); rerr == nil {
				if serr := mcwire.DecodeStatus(sb[:]); serr != nil {
					return fmt.Errorf("%s of %d bytes at 0x%x: %w", opName(c.write), len(c.mem), c.addr, serr)
				}
			}
		}
		return p.broken("send", err)
	}
	if barrier {
		var one [1]byte
		if _, err := io.ReadFull(l.br, one[:]); err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return err
			}
			return fmt.Errorf("connection to Mooncake peer %s (%s): a v1 WRITE of %d bytes at 0x%x was not confirmed: the peer closed the connection (a v1 peer rejects a request that way: outside its buffers?): %v: %w",
				p.name, p.addr, len(c.mem), c.addr, err, plugins.ErrPeerUnreachable)
		}
		return nil
	}
	if p.v2 {
		var sb [mcwire.StatusSize]byte
		if _, err := io.ReadFull(l.br, sb[:]); err != nil {
			return p.broken("receive the status of", err)
		}
		if err := mcwire.DecodeStatus(sb[:]); err != nil {
			return fmt.Errorf("%s of %d bytes at 0x%x: %w", opName(c.write), len(c.mem), c.addr, err)
		}
	}
	if !c.write {
		if _, err := io.ReadFull(l.br, c.mem); err != nil {
			return p.broken("receive", err)
		}
	}
	return nil
}

func opName(write bool) string {
	if write {
		return "WRITE"
	}
	return "READ"
}

func (p *mcPeer) broken(what string, err error) error {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return err
	}
	return fmt.Errorf("connection to Mooncake peer %s (%s) broke: could not %s a request: %v: %w", p.name, p.addr, what, err, plugins.ErrPeerUnreachable)
}
