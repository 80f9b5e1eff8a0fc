package tcp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/kvconnect/kvconnect/internal/spin"
	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/transports/tcp/internal/wire"
)

// conn is one initiator connection to a peer. Chunks are queued in send
// order; a sender goroutine writes them, and the responses, which come
// in order, are matched to the head of the queue. When the connection
// breaks every queued chunk fails and the conn is replaced on next use.
//
// The read side is a token (reading): the reader goroutine holds it
// while requests are outstanding. A caller whose lone small chunk is the
// only request outstanding writes it and reads its response itself
// (enqueue, readOwn), so one small op wakes one goroutine, the caller,
// instead of the reader which then wakes the caller: on a machine with
// few processors that hand-off, and the thread the Go runtime wakes to
// look for work at it, cost more than the op. With no request
// outstanding no one reads: the next request first checks that the peer
// has not closed the connection meanwhile (idleState).
type conn struct {
	p  *peer
	nc net.Conn
	fr *frameReader          // the responses; used by the holder of reading only
	hb [wire.HeaderSize]byte // the response header being read; the holder of reading's (a local would escape to the heap: one allocation per op)

	mu      sync.Mutex
	cond    sync.Cond // the sender's: chunks to write, writing over, broken
	rcond   sync.Cond // the reader goroutine's: requests outstanding with no one reading, broken
	queue   []*chunk  // [head, sent) sent and awaiting a response; [sent, len) not sent yet
	head    int
	sent    int
	err     error // non-nil once broken
	writing bool  // a writer (the sender, or a caller writing its lone chunk) is writing chunks it took from the queue
	reading bool  // a reader (the reader goroutine, or a caller reading its lone chunk's response) reads responses
	nextReq uint64
	fw      *frameWriter // used by the writer of the moment only
	// groups: the peer said it reads groups of requests (a response
	// carried wire.FeatureGroups); set by the reader, read by the writer.
	groups atomic.Bool
	hs     []wire.Header // a group of responses; the holder of reading's
	gchs   []*chunk      // the chunks it answers
	mems   [][]byte      // the READ payloads' places in it

	// A lone chunk's caller (readOwn) learns of its context's end through
	// context.AfterFunc, registered only when its read is about to wait
	// in the poller (armOnWait): a response caught spinning allocates
	// nothing for it. The holder of reading's.
	ownCtx   context.Context
	ownCh    *chunk        // the lone chunk whose response readOwn reads
	ownStop  func() bool   // the registration's stop, once registered
	ownFired chan struct{} // closed when ownWake has run
	ownWake  func()        // made once per conn: stops the read
	// The same for a lone chunk's own write (enqueue), registered when
	// the write is about to wait for room in the socket. The holder of
	// writing's.
	wCtx   context.Context
	wStop  func() bool
	wFired chan struct{}
	wWake  func()

	progress  atomic.Uint64 // responses received; read by the watchdog
	lastSeen  uint64        // watchdog-only
	stallFrom time.Time     // watchdog-only

	wg sync.WaitGroup
}

// errPeerClosed and errUnsolicited are what idleState finds on a socket
// no one reads.
var (
	errPeerClosed  = errors.New("the peer closed the connection")
	errUnsolicited = errors.New("the peer sent bytes no request asked for")
	// errNoResponseYet: a caller's read ended at its deadline before a
	// byte of the response came; the stream is intact.
	errNoResponseYet = errors.New("no response yet")
)

func newConn(p *peer, nc net.Conn) *conn {
	c := &conn{p: p, nc: nc, fr: newFrameReader(nc), fw: newFrameWriter(nc)}
	c.ownWake = func() {
		c.fr.spinStop.Store(true)
		c.nc.SetReadDeadline(time.Unix(1, 0))
		close(c.ownFired)
	}
	c.wWake = func() {
		c.nc.SetWriteDeadline(time.Unix(1, 0))
		close(c.wFired)
	}
	c.cond.L = &c.mu
	c.rcond.L = &c.mu
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

// enqueue queues ch for sending; false if the conn is broken (or found
// broken: its peer closed it while it was idle). With direct set (a
// batch of one small chunk) and nothing else waiting to be written, the
// caller writes the chunk itself instead of handing it to the sender
// goroutine, bounded by ctx's deadline: past it the connection breaks
// (the chunk and the requests behind it fail, and nothing given up
// lands later). selfRead then says the caller holds the read side too:
// it must call readOwn.
func (c *conn) enqueue(ctx context.Context, ch *chunk, direct bool) (ok, selfRead bool) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return false, false
	}
	if c.head == len(c.queue) && !c.reading {
		// Idle: no one read the socket since the last response.
		err := idleState(c.nc)
		if err == nil && c.fr.Buffered() > 0 {
			err = errUnsolicited // came with the last response
		}
		if err != nil {
			c.mu.Unlock()
			c.fail(c.p.brokenErr("idle check", err))
			return false, false
		}
	}
	c.nextReq++
	ch.reqID, ch.c = c.nextReq, c
	c.queue = append(c.queue, ch)
	if !direct || c.writing || c.sent != len(c.queue)-1 {
		c.mu.Unlock()
		c.cond.Signal()
		return true, false
	}
	c.take(c.queue[c.sent:])
	c.sent = len(c.queue)
	c.writing = true
	if !c.reading && c.head == c.sent-1 {
		selfRead, c.reading = true, true
	}
	c.mu.Unlock()
	if !selfRead {
		c.rcond.Signal()
	}
	if d, ok := ctx.Deadline(); ok {
		c.nc.SetWriteDeadline(d)
	}
	// A cancellation (a batch freed, CancelTransfer) ends a write that
	// waits for room as the deadline does: registered only when the write
	// must wait, so one that finds room costs nothing more.
	if c.fw.raw != nil && ctx.Done() != nil {
		c.wCtx = ctx
		c.fw.raw.onWait, c.fw.raw.armW = c, true
	}
	if testBeforeLoneWrite != nil {
		testBeforeLoneWrite(c.nc)
	}
	werr := c.write([]*chunk{ch})
	if c.fw.raw != nil {
		c.fw.raw.onWait, c.fw.raw.armW = nil, false
	}
	c.wCtx = nil
	if c.wStop != nil {
		if !c.wStop() {
			<-c.wFired
		}
		c.wStop, c.wFired = nil, nil
	}
	c.nc.SetWriteDeadline(time.Time{})
	c.mu.Lock()
	c.writing = false
	// Wake the sender only if chunks were queued meanwhile, and fail if it
	// waits for this write: a goroutine woken for nothing costs a thread
	// wake-up, on two processors more than the op itself.
	wake := c.sent != len(c.queue) || c.err != nil
	c.mu.Unlock()
	if wake {
		c.cond.Broadcast()
	}
	if werr != nil {
		if ctxEnded(ctx) != nil {
			c.cut(ctx, ch)
		} else {
			c.fail(c.p.brokenErr("send", werr))
		}
	}
	return true, selfRead
}

// receiveErr is what a failed receive breaks c with: when readOwn reads
// a lone chunk's response and the chunk's context ended (readOwn's
// deadline or cancellation cut the read), that end (cutErr); otherwise
// the peer's loss.
func (c *conn) receiveErr(err error) error {
	if c.ownCtx != nil && ctxEnded(c.ownCtx) != nil {
		return c.cutErr(c.ownCtx, c.ownCh)
	}
	return c.p.brokenErr("receive", err)
}

// ctxEnded is ctx's error, or context.DeadlineExceeded once its deadline
// has passed: a socket deadline set from it may fire before the context's
// own timer does.
func ctxEnded(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return context.DeadlineExceeded
	}
	return nil
}

// cut breaks c because the context of ch, a lone chunk its caller writes
// or reads itself, ended mid-request: ch's batch reports the context's
// end, and the other requests on c fail as a give-up's collateral
// (ErrCanceled: retry them), not as a lost peer. The holder of writing's
// or reading's.
func (c *conn) cut(ctx context.Context, ch *chunk) {
	c.fail(c.cutErr(ctx, ch))
}

// cutErr marks ch's batch given up on (its ops failed by the cut report
// ctx's end) and returns the error that fails c's requests.
func (c *conn) cutErr(ctx context.Context, ch *chunk) error {
	b := ch.st.b
	b.mu.Lock()
	if b.gaveUp == nil {
		b.gaveUp = fmt.Errorf("tcp: batch to peer %s: %w", c.p.name, plugins.ContextError(ctxEnded(ctx)))
	}
	b.mu.Unlock()
	return fmt.Errorf("tcp: request to peer %s aborted: %w: %w", c.p.name, errGivenUp, plugins.ErrCanceled)
}

// readOwn reads the response to the caller's lone chunk, which enqueue
// sent as the only request outstanding, then hands the read side to the
// reader goroutine if requests were sent behind it. ctx bounds the wait:
// when it ends before a byte of the response came, the reader goroutine
// takes over (the chunk stays outstanding, as any other a caller gave up
// on); when it ends mid-response, the connection breaks. sent is when the
// caller began sending the chunk: the wait its peer's Chooser observes
// runs from there (lonespin.go).
func (c *conn) readOwn(ctx context.Context, ch *chunk, sent time.Time) {
	// Spin for the response first (lonespin.go), never past ctx's
	// deadline, and not when the batch's completion is polled already;
	// ctx's end stops the spin (set up before the hook below, which may
	// run at once).
	start := time.Now()
	if budget := c.p.rtt.Budget(); budget > 0 && !plugins.CompletionPolled(ctx) {
		c.fr.spinUntil, c.fr.spinner, c.fr.spun = spinEnd(ctx, start, budget), c.p.rtt, notSpun
		c.fr.spinLock = !spin.MayYield(ctx)
		c.fr.spinStop.Store(false)
	}
	if d, ok := ctx.Deadline(); ok {
		c.nc.SetReadDeadline(d)
	}
	c.ownCtx, c.ownCh = ctx, ch
	if c.fr.raw != nil {
		// Registered by armOnWait when a read is about to wait. A
		// cancellation during the spin before it ends the spin at its
		// budget, not at once.
		c.fr.raw.onWait, c.fr.raw.armR = c, true
	} else {
		c.armOnWait(false)
	}
	_, _, err := c.readOne(false)
	if c.fr.raw != nil {
		c.fr.raw.onWait, c.fr.raw.armR = nil, false
	}
	c.ownCtx, c.ownCh = nil, nil
	c.fr.spinUntil = time.Time{}
	if err == nil {
		took := time.Since(sent)
		c.p.rtt.Observe(took)
		c.p.rtt.Took(took)
	}
	switch c.fr.spun {
	case spunCaught:
		c.p.lone.caught.Add(1)
	case spunSlept:
		c.p.lone.slept.Add(1)
	}
	c.fr.spun = notSpun
	if c.ownStop != nil {
		if !c.ownStop() {
			<-c.ownFired
		}
		c.ownStop, c.ownFired = nil, nil
	}
	c.nc.SetReadDeadline(time.Time{})
	if err != nil && !errors.Is(err, errNoResponseYet) {
		c.fail(err)
	}
	c.mu.Lock()
	c.reading = false
	more := c.err == nil && c.head != c.sent
	c.mu.Unlock()
	if more {
		c.rcond.Signal()
	}
}

// armOnWait registers what ends readOwn's read when its context ends
// (rawIO.onWait: the read is about to wait in the poller; on a platform
// without raw reads, readOwn calls it before reading). A context that
// cannot end needs nothing. For a write (enqueue's own), the same with
// wCtx; the holder of reading's, or of writing's.
func (c *conn) armOnWait(write bool) {
	if write {
		if c.wStop == nil && c.wCtx != nil && c.wCtx.Done() != nil {
			c.wFired = make(chan struct{})
			c.wStop = context.AfterFunc(c.wCtx, c.wWake)
		}
		return
	}
	if c.ownStop != nil || c.ownCtx == nil || c.ownCtx.Done() == nil {
		return
	}
	c.ownFired = make(chan struct{})
	c.ownStop = context.AfterFunc(c.ownCtx, c.ownWake)
}

// take marks chunks the writer takes from the queue (moving sent past
// them, under c.mu): each WRITE among them now also waits for its
// payload to be written (opState.remaining). It is done under c.mu, so
// no response, however early, can complete a chunk before it is counted.
func (c *conn) take(chs []*chunk) {
	for _, ch := range chs {
		if ch.op == wire.OpWrite {
			ch.st.remaining.Add(1)
		}
	}
}

// write writes chunks as one burst (the target answers it in one write).
// The caller is the writer: it set writing, and took the chunks (take).
// Every chunk is marked written once the flush that carried it returns,
// or once write gives up on it.
func (c *conn) write(batch []*chunk) error {
	var werr error
	var h wire.Header
	c.fw.grouped = c.groups.Load()
	done := 0 // batch[:done] is written and marked so
	for i, ch := range batch {
		// FlagGroups on every request: this side reads groups of responses.
		h = wire.Header{Op: ch.op, Status: wire.FlagGroups, ReqID: ch.reqID, Region: ch.remoteRegion, Offset: ch.remoteOffset, Length: uint64(len(ch.local))}
		if i == len(batch)-1 {
			h.Status |= wire.FlagFlush // the target answers this burst in one write
		}
		var payload []byte
		if ch.op == wire.OpWrite {
			payload = ch.local
		}
		flushes := c.fw.flushes
		if werr = c.fw.frame(&h, payload, nil); werr != nil {
			break
		}
		if c.fw.flushes != flushes {
			// frame flushed: before queuing ch (the buffer was full), or
			// after (enough was pending), when nothing is left pending.
			upto := i
			if c.fw.pending == 0 {
				upto = i + 1
			}
			markWritten(batch[done:upto])
			done = upto
		}
	}
	if werr == nil {
		werr = c.fw.flush()
	} else {
		c.fw.discard()
	}
	markWritten(batch[done:])
	return werr
}

func markWritten(chs []*chunk) {
	for _, ch := range chs {
		ch.written()
	}
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
	c.rcond.Broadcast()
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

// takeBack removes b's chunks not sent yet from the queue and returns
// them; the caller completes them.
func (c *conn) takeBack(b *batch) (taken []*chunk) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return nil // broken: its chunks failed, or are failing
	}
	keep := c.queue[:c.sent]
	for _, ch := range c.queue[c.sent:] {
		if ch.st.b == b {
			taken = append(taken, ch)
		} else {
			keep = append(keep, ch)
		}
	}
	clear(c.queue[len(keep):])
	c.queue = keep
	return taken
}

// brokenBy is why a read or write on c failed: the reason c was failed,
// when it was (fail sets it before closing the socket, which is what
// ended the read), else err.
func (c *conn) brokenBy(err error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return c.err
	}
	return err
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
		c.take(batch)
		c.sent = len(c.queue)
		c.writing = true
		idle := !c.reading
		c.mu.Unlock()
		if idle {
			c.rcond.Signal() // the reader goroutine reads the answers
		}
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

// readLoop reads responses while requests are outstanding and no caller
// reads its own.
func (c *conn) readLoop() {
	defer c.wg.Done()
	for {
		c.mu.Lock()
		for c.err == nil && (c.reading || c.head == c.sent) {
			c.rcond.Wait()
		}
		if c.err != nil {
			c.mu.Unlock()
			return
		}
		c.reading = true
		c.mu.Unlock()
		for {
			_, released, err := c.readOne(true)
			if err != nil {
				c.fail(err)
				return
			}
			if released {
				break
			}
		}
	}
}

// readOne reads one response and completes the chunk at the head of the
// queue with it. The caller holds the read side. An error breaks the
// connection (the caller fails it); started says whether any byte of
// the response had been read. With release set, a response that leaves
// no request outstanding gives up the read side before its chunk
// completes (released): whoever the completion wakes finds the
// connection idle, so its next request checks the socket first instead
// of sending behind a reader that would take what the peer sent
// meanwhile for a response.
func (c *conn) readOne(release bool) (started, released bool, err error) {
	hb := &c.hb
	var h wire.Header
	if n, err := c.fr.header(hb[:]); err != nil {
		if n == 0 && errors.Is(err, os.ErrDeadlineExceeded) {
			return false, false, fmt.Errorf("%w: %w", errNoResponseYet, c.p.brokenErr("receive", err))
		}
		return n > 0, false, c.receiveErr(err)
	}
	if err := h.Decode(hb[:]); err != nil {
		return true, false, fmt.Errorf("tcp: peer %s sent a malformed response: %v: %w", c.p.name, err, plugins.ErrProtocol)
	}
	if h.Op == wire.OpGroup {
		released, err := c.readGroup(&h, release)
		return true, released, err
	}
	if h.Op.IsResponse() && h.Region&wire.FeatureGroups != 0 && !c.groups.Load() {
		c.groups.Store(true)
	}
	c.mu.Lock()
	if c.head == c.sent {
		c.mu.Unlock()
		return true, false, fmt.Errorf("tcp: peer %s sent an unsolicited response (request %d): %w", c.p.name, h.ReqID, plugins.ErrProtocol)
	}
	ch := c.queue[c.head]
	c.queue[c.head] = nil
	c.head++
	if c.head == len(c.queue) {
		c.queue, c.head, c.sent = c.queue[:0], 0, 0
	}
	c.mu.Unlock()
	if err := c.checkResponse(&h, ch); err != nil {
		ch.complete(err)
		return true, false, err
	}
	if h.Status != wire.StatusOK {
		c.progress.Add(1)
		released = release && c.releaseIfIdle()
		ch.complete(ch.remoteError(c.p.name, h.Status))
		return true, released, nil
	}
	if ch.op == wire.OpRead {
		if _, err := c.fr.payload(ch.local); err != nil {
			err = c.brokenBy(c.receiveErr(err))
			ch.complete(err)
			return true, false, err
		}
	}
	c.progress.Add(1)
	released = release && c.releaseIfIdle()
	ch.complete(nil)
	return true, released, nil
}

// releaseIfIdle gives up the read side if no request is outstanding.
func (c *conn) releaseIfIdle() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.head != c.sent {
		return false
	}
	c.reading = false
	return true
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

	// stopDials ends when the peer closes: dials under way (a redial's
	// connect or authentication) end with it rather than hold Close.
	stopDials context.Context
	endDials  context.CancelFunc

	mu        sync.Mutex
	conns     []*conn
	closed    error
	dialErr   error     // the last failed dial
	dialErrAt time.Time // when it failed; redials wait redialBackoff after it
	rr        atomic.Uint32

	// rtt learns how long a lone small op's response takes, to spin for
	// it (readOwn).
	rtt  *spin.Adapt
	lone struct{ caught, slept atomic.Uint64 } // lone ops whose response came while spinning, or after a sleep
}

// redialBackoff is how long after a failed dial a peer's broken slots fail
// fast instead of dialing again, so a batch to a dead peer does not dial
// once per chunk.
const redialBackoff = 500 * time.Millisecond

func newPeer(t *Transport, id plugins.PeerID, name, addr string) *peer {
	if name == "" {
		name = addr
	}
	stop, end := context.WithCancel(context.Background())
	return &peer{t: t, id: id, name: name, addr: addr, nconns: t.opts.Connections, rtt: spin.NewChoosing(EnvLoneSpin, maxLoneSpin),
		conns: make([]*conn, t.opts.Connections), redial: make([]sync.Mutex, t.opts.Connections), stopDials: stop, endDials: end}
}

func (p *peer) brokenErr(dir string, err error) error {
	if errors.Is(err, net.ErrClosed) {
		if closed := p.closedErr(); closed != nil {
			return closed
		}
	}
	return fmt.Errorf("tcp: connection to peer %s (%s) broke on %s: %v: %w", p.name, p.addr, dir, err, plugins.ErrPeerUnreachable)
}

func (p *peer) dial(ctx context.Context) (*conn, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(p.stopDials, cancel)()
	d := net.Dialer{Timeout: time.Duration(p.t.opts.ConnectTimeout), KeepAlive: 15 * time.Second}
	nc, err := d.DialContext(ctx, "tcp", p.addr)
	if err != nil {
		if closed := p.closedErr(); closed != nil {
			return nil, closed
		}
		return nil, fmt.Errorf("tcp: dial peer %s at %s: %v: %w", p.name, p.addr, err, plugins.ErrPeerUnreachable)
	}
	// The authentication reads and writes under deadlines; the peer's
	// closing (or ctx's end) cuts it short.
	interrupt := context.AfterFunc(ctx, func() { nc.SetDeadline(time.Now()) })
	err = p.t.prove(ctx, nc)
	if !interrupt() && err == nil {
		err = fmt.Errorf("tcp: authenticating the data connection: %w", plugins.ContextError(ctx.Err()))
	}
	if err != nil {
		nc.Close()
		if closed := p.closedErr(); closed != nil {
			return nil, closed
		}
		return nil, fmt.Errorf("tcp: peer %s at %s: %w", p.name, p.addr, err)
	}
	return newConn(p, nc), nil
}

// closedErr is why the peer closed, or nil.
func (p *peer) closedErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
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
		if ctx.Err() == nil { // a caller giving up says nothing of the peer
			p.mu.Lock()
			p.dialErr, p.dialErrAt = err, time.Now()
			p.mu.Unlock()
		}
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
		if caught, slept := p.lone.caught.Load(), p.lone.slept.Load(); caught+slept > 0 {
			p.t.log.Debug("tcp: lone ops' responses", zap.String("peer", p.name), zap.Uint64("caught_spinning", caught),
				zap.Uint64("after_sleeping", slept), zap.Duration("typical_answer", p.rtt.Mean()), zap.Any("choice", p.rtt.Choose.Choice()))
		}
	}
	conns := p.conns
	p.conns = make([]*conn, len(conns))
	p.mu.Unlock()
	p.endDials()
	for _, c := range conns {
		if c != nil {
			c.close(err)
		}
	}
}
