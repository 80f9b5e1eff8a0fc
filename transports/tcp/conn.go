package tcp

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/transports/tcp/internal/wire"
)

// conn is one initiator connection to a peer. Chunks are queued in send
// order; a sender goroutine writes them, a reader goroutine matches the
// in-order responses to the head of the queue. When the connection breaks
// every queued chunk fails and the conn is replaced on next use.
type conn struct {
	p  *peer
	nc net.Conn

	mu      sync.Mutex
	cond    sync.Cond
	queue   []*chunk // [head, sent) sent and awaiting a response; [sent, len) not sent yet
	head    int
	sent    int
	err     error // non-nil once broken
	writing bool  // a writer (the sender, or a caller writing its lone chunk) is writing chunks it took from the queue
	nextReq uint64
	fw      *frameWriter // used by the writer of the moment only

	progress  atomic.Uint64 // responses received; read by the watchdog
	lastSeen  uint64        // watchdog-only
	stallFrom time.Time     // watchdog-only

	wg sync.WaitGroup
}

func newConn(p *peer, nc net.Conn) *conn {
	c := &conn{p: p, nc: nc, fw: newFrameWriter(nc)}
	c.cond.L = &c.mu
	c.wg.Add(2)
	go c.sendLoop()
	go c.readLoop()
	return c
}

func (c *conn) broken() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err != nil
}

// enqueue queues ch for sending; false if the conn is broken. With
// direct set (a batch of one small chunk) and nothing else waiting to be
// written, the caller writes the chunk itself instead of handing it to
// the sender goroutine: one goroutine hand-off less for a small op. That
// write is bounded by ctx's deadline: past it the connection breaks (the
// chunk and the requests behind it fail, and nothing given up lands later).
func (c *conn) enqueue(ctx context.Context, ch *chunk, direct bool) bool {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return false
	}
	c.nextReq++
	ch.reqID = c.nextReq
	c.queue = append(c.queue, ch)
	if !direct || c.writing || c.sent != len(c.queue)-1 {
		c.mu.Unlock()
		c.cond.Signal()
		return true
	}
	c.sent = len(c.queue)
	c.writing = true
	c.mu.Unlock()
	if d, ok := ctx.Deadline(); ok {
		c.nc.SetWriteDeadline(d)
	}
	werr := c.write([]*chunk{ch})
	c.nc.SetWriteDeadline(time.Time{})
	c.mu.Lock()
	c.writing = false
	c.mu.Unlock()
	c.cond.Broadcast() // the sender may have chunks queued meanwhile; fail may wait
	if werr != nil {
		c.fail(c.p.brokenErr("send", werr))
	}
	return true
}

// write writes chunks as one burst (the target answers it in one write).
// The caller is the writer: it set writing.
func (c *conn) write(batch []*chunk) error {
	var werr error
	var h wire.Header
	for i, ch := range batch {
		h = wire.Header{Op: ch.op, ReqID: ch.reqID, Region: ch.remoteRegion, Offset: ch.remoteOffset, Length: uint64(len(ch.local))}
		if i == len(batch)-1 {
			h.Status = wire.FlagFlush // the target answers this burst in one write
		}
		var payload []byte
		if ch.op == wire.OpWrite {
			payload = ch.local
		}
		if werr = c.fw.frame(&h, payload, nil); werr != nil {
			break
		}
	}
	if werr == nil {
		return c.fw.flush()
	}
	c.fw.discard()
	return werr
}

// fail breaks the connection: every queued chunk fails with err. It waits
// for a write in progress to end first (closing the socket ends it), so no
// chunk completes, and its region is released, while the sender still
// reads its memory.
func (c *conn) fail(err error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = err
	if c.head < len(c.queue) {
		// Requests failed here must not land later (a cut link back, a
		// stopped target resumed): reset, do not flush.
		abortOnClose(c.nc)
	}
	c.mu.Unlock()
	c.cond.Broadcast()
	c.nc.Close()
	c.mu.Lock()
	for c.writing {
		c.cond.Wait()
	}
	pending := c.queue[c.head:]
	c.queue, c.head, c.sent = nil, 0, 0
	c.mu.Unlock()
	for _, ch := range pending {
		ch.complete(err)
	}
}

// close breaks the connection and waits for its goroutines.
func (c *conn) close(err error) {
	c.fail(err)
	c.wg.Wait()
}

func (c *conn) sendLoop() {
	defer c.wg.Done()
	var batch []*chunk
	for {
		c.mu.Lock()
		for (c.sent == len(c.queue) || c.writing) && c.err == nil {
			c.cond.Wait()
		}
		if c.err != nil {
			c.mu.Unlock()
			return
		}
		batch = append(batch[:0], c.queue[c.sent:]...)
		c.sent = len(c.queue)
		c.writing = true
		c.mu.Unlock()
		werr := c.write(batch)
		clear(batch)
		c.mu.Lock()
		c.writing = false
		c.mu.Unlock()
		c.cond.Broadcast()
		if werr != nil {
			c.fail(c.p.brokenErr("send", werr))
			return
		}
	}
}

func (c *conn) readLoop() {
	defer c.wg.Done()
	br := bufio.NewReaderSize(c.nc, readBufferSize)
	var hb [wire.HeaderSize]byte
	var h wire.Header
	for {
		if _, err := io.ReadFull(br, hb[:]); err != nil {
			c.fail(c.p.brokenErr("receive", err))
			return
		}
		if err := h.Decode(hb[:]); err != nil {
			c.fail(fmt.Errorf("tcp: peer %s sent a malformed response: %v: %w", c.p.name, err, plugins.ErrProtocol))
			return
		}
		c.mu.Lock()
		if c.head == c.sent {
			c.mu.Unlock()
			c.fail(fmt.Errorf("tcp: peer %s sent an unsolicited response (request %d): %w", c.p.name, h.ReqID, plugins.ErrProtocol))
			return
		}
		ch := c.queue[c.head]
		c.queue[c.head] = nil
		c.head++
		if c.head == len(c.queue) {
			c.queue, c.head, c.sent = c.queue[:0], 0, 0
		}
		c.mu.Unlock()
		want := wire.OpWriteAck
		if ch.op == wire.OpRead {
			want = wire.OpReadResp
		}
		if h.ReqID != ch.reqID || h.Op != want {
			err := fmt.Errorf("tcp: peer %s answered request %d (%s) with %s for request %d: %w", c.p.name, ch.reqID, ch.op, h.Op, h.ReqID, plugins.ErrProtocol)
			ch.complete(err)
			c.fail(err)
			return
		}
		if h.Status != wire.StatusOK {
			if h.Length != 0 {
				err := fmt.Errorf("tcp: peer %s sent payload with error status %s: %w", c.p.name, h.Status, plugins.ErrProtocol)
				ch.complete(err)
				c.fail(err)
				return
			}
			c.progress.Add(1)
			ch.complete(ch.remoteError(c.p.name, h.Status))
			continue
		}
		if ch.op == wire.OpRead {
			if h.Length != uint64(len(ch.local)) {
				err := fmt.Errorf("tcp: peer %s answered a %d-byte read with %d bytes: %w", c.p.name, len(ch.local), h.Length, plugins.ErrProtocol)
				ch.complete(err)
				c.fail(err)
				return
			}
			if _, err := io.ReadFull(br, ch.local); err != nil {
				err = c.p.brokenErr("receive", err)
				ch.complete(err)
				c.fail(err)
				return
			}
		}
		c.progress.Add(1)
		ch.complete(nil)
	}
}

// checkStalled fails the connection if it has had work outstanding with no
// response for longer than timeout. Called only by the watchdog.
func (c *conn) checkStalled(now time.Time, timeout time.Duration) {
	c.mu.Lock()
	busy := c.err == nil && c.head < len(c.queue)
	c.mu.Unlock()
	seen := c.progress.Load()
	if !busy || seen != c.lastSeen {
		c.lastSeen = seen
		c.stallFrom = time.Time{}
		return
	}
	if c.stallFrom.IsZero() {
		c.stallFrom = now
		return
	}
	if now.Sub(c.stallFrom) >= timeout {
		c.fail(fmt.Errorf("tcp: peer %s made no progress for %v (transports.tcp.op_timeout): %w", c.p.name, timeout, plugins.ErrTimeout))
	}
}

// peer is a connected remote node: a fixed set of connection slots, each
// redialed when its connection breaks.
type peer struct {
	t    *Transport
	id   plugins.PeerID
	name string
	addr string

	nconns int          // len(conns), fixed
	redial []sync.Mutex // one redial at a time per slot

	mu        sync.Mutex
	conns     []*conn
	closed    error
	dialErr   error     // the last failed dial
	dialErrAt time.Time // when it failed; redials wait redialBackoff after it
	rr        atomic.Uint32
}

// redialBackoff is how long after a failed dial a peer's broken slots fail
// fast instead of dialing again, so a batch to a dead peer does not dial
// once per chunk.
const redialBackoff = 500 * time.Millisecond

func newPeer(t *Transport, id plugins.PeerID, name, addr string) *peer {
	if name == "" {
		name = addr
	}
	return &peer{t: t, id: id, name: name, addr: addr, nconns: t.opts.Connections,
		conns: make([]*conn, t.opts.Connections), redial: make([]sync.Mutex, t.opts.Connections)}
}

func (p *peer) brokenErr(dir string, err error) error {
	if errors.Is(err, net.ErrClosed) {
		p.mu.Lock()
		closed := p.closed
		p.mu.Unlock()
		if closed != nil {
			return closed
		}
	}
	return fmt.Errorf("tcp: connection to peer %s (%s) broke on %s: %v: %w", p.name, p.addr, dir, err, plugins.ErrPeerUnreachable)
}

func (p *peer) dial(ctx context.Context) (*conn, error) {
	d := net.Dialer{Timeout: time.Duration(p.t.opts.ConnectTimeout), KeepAlive: 15 * time.Second}
	nc, err := d.DialContext(ctx, "tcp", p.addr)
	if err != nil {
		return nil, fmt.Errorf("tcp: dial peer %s at %s: %v: %w", p.name, p.addr, err, plugins.ErrPeerUnreachable)
	}
	if err := p.t.prove(ctx, nc); err != nil {
		nc.Close()
		return nil, fmt.Errorf("tcp: peer %s at %s: %w", p.name, p.addr, err)
	}
	return newConn(p, nc), nil
}

// dialAll opens every connection slot; it fails if any dial fails.
func (p *peer) dialAll(ctx context.Context) error {
	for i := 0; i < p.nconns; i++ {
		c, err := p.dial(ctx)
		if err != nil {
			return err
		}
		p.mu.Lock()
		p.conns[i] = c
		p.mu.Unlock()
	}
	return nil
}

// pick returns a healthy connection, starting at slot start and redialing
// broken slots. It returns an error only when no slot can be made healthy.
func (p *peer) pick(ctx context.Context, start int) (*conn, error) {
	n := p.nconns
	var lastErr error
	for k := 0; k < n; k++ {
		i := (start + k) % n
		p.mu.Lock()
		if p.closed != nil {
			err := p.closed
			p.mu.Unlock()
			return nil, err
		}
		c := p.conns[i]
		recentErr := p.dialErr
		if time.Since(p.dialErrAt) >= redialBackoff {
			recentErr = nil
		}
		p.mu.Unlock()
		if c != nil && !c.broken() {
			return c, nil
		}
		if recentErr != nil {
			lastErr = recentErr
			continue
		}
		nc, err := p.redialSlot(ctx, i)
		if err != nil {
			lastErr = err
			continue
		}
		return nc, nil
	}
	return nil, lastErr
}

// redialSlot replaces slot i's broken connection. Concurrent callers wait
// for one dial and share its connection, so no caller closes a fresh
// connection another caller already queued chunks on.
func (p *peer) redialSlot(ctx context.Context, i int) (*conn, error) {
	p.redial[i].Lock()
	defer p.redial[i].Unlock()
	p.mu.Lock()
	if p.closed != nil {
		err := p.closed
		p.mu.Unlock()
		return nil, err
	}
	if c := p.conns[i]; c != nil && !c.broken() {
		p.mu.Unlock()
		return c, nil // someone else redialed it meanwhile
	}
	p.mu.Unlock()
	nc, err := p.dial(ctx)
	if err != nil {
		p.mu.Lock()
		p.dialErr, p.dialErrAt = err, time.Now()
		p.mu.Unlock()
		return nil, err
	}
	p.mu.Lock()
	if p.closed != nil {
		err := p.closed
		p.mu.Unlock()
		nc.close(err)
		return nil, err
	}
	old := p.conns[i]
	p.conns[i] = nc
	p.mu.Unlock()
	if old != nil {
		old.close(plugins.ErrClosed) // broken: only waits for its goroutines
	}
	return nc, nil
}

func (p *peer) appendConns(out []*conn) []*conn {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		if c != nil {
			out = append(out, c)
		}
	}
	return out
}

func (p *peer) close(err error) {
	p.mu.Lock()
	if p.closed == nil {
		p.closed = err
	}
	conns := p.conns
	p.conns = make([]*conn, len(conns))
	p.mu.Unlock()
	for _, c := range conns {
		if c != nil {
			c.close(err)
		}
	}
}
