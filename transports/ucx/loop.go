package ucx

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	ucxlib "github.com/kvconnect/kvconnect/internal/ucx"
	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/plugins/regions"
)

// ctlSlots are the slots beyond max_inflight, for flushes, control
// messages and endpoint closes.
const ctlSlots = 256

// closeAckTimeout bounds how long Close waits for peers to acknowledge
// that this node's regions are gone (unless op_timeout or the context is
// shorter).
const closeAckTimeout = 5 * time.Second

type epState uint8

const (
	epNone epState = iota
	epOpen
	epClosing
	epClosed
)

// conn is the one UCP endpoint to a remote worker, shared by every role:
// the peers this node opened there and that worker as a client of this
// node's memory. UCX pairs the endpoints two workers create to each other
// by creation order (ucp_ep_match), so one endpoint per worker pair on
// each side keeps a client's RMA path and the owner's control path the
// same connection. A conn is closed only when it failed or at Close:
// closing an endpoint that UCX paired with one the other side still uses
// would break that side's connection.
type conn struct {
	key        string // the remote worker address
	ep         ucxlib.EP
	peerErrors bool
	state      epState
	err        error // set when the endpoint failed
	where      place // the remote process
	local      bool  // same host and pid namespace as this process
	peers      map[*peer]struct{}
	clients    map[*client]struct{}
}

// usable says why nothing can be sent on c, or nil.
func (c *conn) usable() error {
	switch {
	case c.err != nil:
		return c.err
	case c.state != epOpen:
		return fmt.Errorf("endpoint closed: %w", plugins.ErrPeerUnreachable)
	}
	return nil
}

// peer is a node this transport connected to (as a client of its memory).
type peer struct {
	id      plugins.PeerID // set by Connect under Transport.mu
	name    string
	client  uint64 // this node's client id at the peer
	remote  *remoteTable
	where   place
	welcome chan error // Connect waits on it; buffered

	// Progress-loop state.
	conn         *conn
	err          error // set when the peer failed, closed or was disconnected
	inflight     int   // op and flush slots in flight
	lastProgress time.Time
	welcomed     bool
	live         map[liveRegion]bool
	closing      bool // torn down: drain, say bye, destroy rkeys
	drained      bool // the endpoint flush after teardown completed
	released     bool
}

// client is a node that connected to this one (the owner side).
type client struct {
	id   uint64
	conn *conn
}

// localMem is a region registered with UCX.
type localMem struct {
	id    plugins.RegionID
	token uint64
	va    uintptr
	size  uint64
	memh  ucxlib.Mem
}

// revocation waits for clients to acknowledge a revoke.
type revocation struct {
	seq      uint64
	waiting  map[uint64]*client
	deadline time.Time
	done     chan error // buffered; receives the outcome once
	finished bool
	then     func(error) // loop-side continuation, or nil
}

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

type slotKind uint8

const (
	slotFree slotKind = iota
	slotOp
	slotFlush
	slotCtl
)

type slot struct {
	kind      slotKind
	b         *batch
	i         int
	p         *peer
	fn        func(ucxlib.Status)
	abandoned bool // its op was reported failed; release when UCX is done
}

// Close phases.
const (
	closeNone   = iota
	closeRevoke // waiting for clients to acknowledge that everything is gone
	closePeers  // peers torn down: waiting for their in-flight ops
	closeConns  // endpoints closing
)

// loop is the progress thread: it owns the UCP worker and all state below
// the command queue.
type loop struct {
	name string
	opts Options
	log  *zap.Logger
	w    *ucxlib.Worker

	// Set before the loop serves commands; read-only afterwards.
	address          []byte
	resources        []ucxlib.Resource
	sharedMemoryOnly bool
	sharedMemory     bool  // some resource is shared memory
	here             place // this process
	closedErr        error

	cmdMu   sync.Mutex
	cmds    []func()
	stopped bool
	exited  chan struct{}

	// Progress-loop state.
	slots         []slot
	free          []uint32
	opSlots       int
	runq          []*batch
	conns         map[string]*conn // open endpoints by remote worker address
	byEP          map[ucxlib.EP]*conn
	peers         map[uint64]*peer   // by client id
	clients       map[uint64]*client // by client id
	mems          map[plugins.RegionID]*localMem
	leaked        []*localMem // deregistrations not acknowledged: unmapped at Close
	revokes       map[uint64]*revocation
	busy          map[*peer]struct{}  // peers with slots in flight
	batches       map[*batch]struct{} // unfinished batches
	nextSeq       uint64
	ctlq          []func() bool
	closing       bool
	closePhase    int
	closeDeadline time.Time
	exit          bool
	lastTick      time.Time
	stuckSince    time.Time // UCX busy without delivering anything since
	stuckLogged   bool
	msg           []byte
	cbuf          []ucxlib.Completion
	ebuf          []ucxlib.EPError
	post          []ucxlib.Op
	cmdBuf        []func()
}

// startLoop starts the progress thread, which creates the worker.
func startLoop(name string, opts Options, log *zap.Logger, cfg ucxlib.Config) (*loop, error) {
	l := &loop{name: name, opts: opts, log: log, exited: make(chan struct{}),
		closedErr: fmt.Errorf("%s: transport closed: %w", name, plugins.ErrClosed),
		conns:     map[string]*conn{}, byEP: map[ucxlib.EP]*conn{},
		peers: map[uint64]*peer{}, clients: map[uint64]*client{}, mems: map[plugins.RegionID]*localMem{},
		revokes: map[uint64]*revocation{}, busy: map[*peer]struct{}{}, batches: map[*batch]struct{}{},
		here: thisPlace()}
	ready := make(chan error, 1)
	go l.run(cfg, ready)
	if err := <-ready; err != nil {
		<-l.exited
		return nil, err
	}
	return l, nil
}

func (l *loop) run(cfg ucxlib.Config, ready chan<- error) {
	// The thread stays locked: when run returns the thread ends with it,
	// and with it anything UCX kept per thread.
	runtime.LockOSThread()
	defer close(l.exited)
	w, err := ucxlib.NewWorker(cfg)
	if err == nil {
		l.address, err = w.Address()
		if err != nil {
			w.Destroy()
		}
	}
	if err != nil {
		l.markStopped()
		ready <- err
		return
	}
	l.w = w
	l.resources = w.Resources()
	l.sharedMemoryOnly = len(l.resources) > 0
	for _, r := range l.resources {
		l.sharedMemoryOnly = l.sharedMemoryOnly && r.IsSharedMemory()
		l.sharedMemory = l.sharedMemory || r.IsSharedMemory() && r.Transport != "self"
	}
	l.slots = make([]slot, w.Slots())
	for i := len(l.slots) - 1; i >= 0; i-- {
		l.free = append(l.free, uint32(i))
	}
	l.msg = make([]byte, ucxlib.MaxMessage)
	ready <- nil

	for !l.exit {
		l.runCommands()
		l.issue()
		l.retryCtl()
		progressed := false
		for i := 0; i < 64; i++ {
			n := w.Progress(32)
			if !l.drain() && n == 0 {
				break
			}
			progressed = true
		}
		if l.closing {
			l.advanceClose()
		}
		if l.exit {
			break
		}
		now := time.Now()
		if l.watching() && now.Sub(l.lastTick) >= l.tickEvery() {
			l.lastTick = now
			l.tick(now)
		}
		if l.runnable() || l.hasCommands() {
			continue
		}
		timeout := time.Duration(-1)
		if l.watching() {
			timeout = max(l.tickEvery()-time.Since(l.lastTick), 0)
		}
		busy, err := w.Wait(timeout)
		if err != nil {
			l.log.Error(l.name+": waiting for UCX events failed; polling", zap.Error(err))
			time.Sleep(time.Millisecond)
		}
		l.backoff(busy && !progressed, now)
	}
	l.finish()
}

// backoff slows the loop down while UCX keeps saying it has events that
// progress does not deliver. A peer that died while writing into this
// worker's shared-memory FIFO (posix, sysv) leaves a slot that never
// becomes ready: the FIFO is wedged for good, UCX's arm reports busy
// forever, and polling it would burn a core.
func (l *loop) backoff(stuck bool, now time.Time) {
	if !stuck {
		l.stuckSince = time.Time{}
		return
	}
	if l.stuckSince.IsZero() {
		l.stuckSince = now
		return
	}
	stuckFor := now.Sub(l.stuckSince)
	if stuckFor > time.Duration(l.opts.OpTimeout) && !l.stuckLogged {
		l.stuckLogged = true
		l.log.Error(l.name + ": UCX has reported pending events without delivering any for " + stuckFor.Round(time.Second).String() +
			"; a shared-memory FIFO may be wedged by a peer that died while sending to this node (UCX 1.13 cannot recover it; restart the transport)")
	}
	if stuckFor > 10*time.Millisecond {
		time.Sleep(time.Millisecond)
	}
}

func (l *loop) tickEvery() time.Duration {
	return min(max(time.Duration(l.opts.OpTimeout)/8, time.Millisecond), 250*time.Millisecond)
}

// watching reports whether something has a deadline: ops in flight,
// revocations, deferred control actions, or a close in progress.
func (l *loop) watching() bool {
	return l.closing || len(l.revokes) > 0 || len(l.ctlq) > 0 || len(l.busy) > 0
}

func (l *loop) runnable() bool {
	return len(l.runq) > 0 && l.opSlots < l.opts.MaxInflight && len(l.free) > 0
}

// enqueue runs fn on the loop; false if the loop has stopped.
func (l *loop) enqueue(fn func()) bool {
	l.cmdMu.Lock()
	defer l.cmdMu.Unlock()
	if l.stopped {
		return false
	}
	l.cmds = append(l.cmds, fn)
	l.w.Wake() // under cmdMu: finish stops the queue before it closes the fd
	return true
}

// call runs fn on the loop and returns its error; ErrClosed once the
// transport is closing.
func (l *loop) call(fn func() error) error {
	done := make(chan error, 1)
	if !l.enqueue(func() {
		if l.closing {
			done <- l.closedErr
			return
		}
		done <- fn()
	}) {
		return l.closedErr
	}
	return <-done
}

func (l *loop) hasCommands() bool {
	l.cmdMu.Lock()
	defer l.cmdMu.Unlock()
	return len(l.cmds) > 0
}

func (l *loop) runCommands() {
	l.cmdMu.Lock()
	cmds := l.cmds
	l.cmds = l.cmdBuf[:0]
	l.cmdMu.Unlock()
	for i, fn := range cmds {
		fn()
		cmds[i] = nil
	}
	l.cmdBuf = cmds
}

func (l *loop) markStopped() {
	l.cmdMu.Lock()
	l.stopped = true
	l.cmdMu.Unlock()
}

// shutdown closes the loop and waits for it to end.
func (l *loop) shutdown(ctx context.Context) {
	deadline := time.Now().Add(min(time.Duration(l.opts.OpTimeout), closeAckTimeout))
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	l.enqueue(func() { l.beginClose(deadline) })
	<-l.exited
}

// --- slots -----------------------------------------------------------------

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

// --- batches ---------------------------------------------------------------

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

// --- completions and events --------------------------------------------------

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

// --- connections ---------------------------------------------------------------

// connTo returns the open connection to a remote worker, creating it with
// the configured error handling. In auto mode a process on this host that
// shares the pid namespace gets none when the context has shared-memory
// lanes: UCX 1.13's posix and sysv lanes have no peer failure handler, so
// asking for one makes UCX carry the (active-message emulated) RMA over
// tcp instead, several times slower; such a peer's death is noticed by its
// pid instead. Other peers try peer error handling first.
func (l *loop) connTo(addr []byte, where place) (*conn, error) {
	if c := l.conns[string(addr)]; c != nil && c.usable() == nil {
		return c, nil
	}
	local := l.here.samePIDs(where)
	var ep ucxlib.EP
	var err error
	peerErrors := false
	switch {
	case l.opts.ErrorMode == "peer":
		peerErrors = true
		ep, err = l.w.Connect(addr, true)
	case l.opts.ErrorMode == "none" || l.sharedMemoryOnly || local && l.sharedMemory:
		ep, err = l.w.Connect(addr, false)
	default:
		if ep, err = l.w.Connect(addr, true); err == nil {
			peerErrors = true
		} else if ep2, err2 := l.w.Connect(addr, false); err2 == nil {
			ep, err = ep2, nil
		}
	}
	if err != nil {
		return nil, err
	}
	c := &conn{key: string(addr), ep: ep, peerErrors: peerErrors, state: epOpen, where: where, local: local,
		peers: map[*peer]struct{}{}, clients: map[*client]struct{}{}}
	l.conns[c.key] = c
	l.byEP[ep] = c
	return c, nil
}

// connFailed: UCX reported the endpoint failed (peer error handling).
// Every peer on it fails, every client on it is gone, and the endpoint is
// closed forcibly, as UCX requires for a failed endpoint.
func (l *loop) connFailed(c *conn, err error) {
	if c.err != nil {
		return
	}
	c.err = fmt.Errorf("connection failed: %w", err)
	l.log.Debug(l.name+": endpoint failed", zap.Error(err), zap.Int("peers", len(c.peers)), zap.Int("clients", len(c.clients)))
	for p := range c.peers {
		if p.err == nil {
			p.err = fmt.Errorf("%s: peer %s: %w", l.name, p.name, c.err)
		}
	}
	for cl := range c.clients {
		l.dropClient(cl)
	}
	l.closeConn(c, true)
	l.issue()
}

// closeConn closes c's endpoint; force is only used for failed endpoints
// (UCX requires it) and unresponsive peers: over UCX 1.13's tcp lanes a
// live peer answers emulated PUTs and GETs, and a reply that finds its
// endpoint gone aborts the peer's process (ucs_fatal in
// ucp_request_try_send), so live endpoints close in flush mode.
func (l *loop) closeConn(c *conn, force bool) {
	if c.state != epOpen {
		return
	}
	c.state = epClosing
	if l.conns[c.key] == c {
		delete(l.conns, c.key)
	}
	force = force && c.peerErrors
	ep := c.ep
	l.ctl(func(s uint32) ucxlib.Status { return l.w.CloseEP(s, ep, force) }, func(ucxlib.Status) {
		c.state = epClosed
		delete(l.byEP, ep)
		// UCX has completed every request on the endpoint.
		for p := range c.peers {
			l.destroyRkeys(p)
		}
	})
}

func (l *loop) destroyRkeys(p *peer) {
	for _, rr := range p.remote.byAddr {
		if rr.rkey != 0 {
			l.w.DestroyRkey(rr.rkey)
			rr.rkey = 0
		}
	}
}

// --- peers (this node as a client) ---------------------------------------------

func (l *loop) openPeer(p *peer, worker []byte) error {
	c, err := l.connTo(worker, p.where)
	if err != nil {
		return fmt.Errorf("%s: connecting to %s: %w", l.name, p.name, err)
	}
	p.conn = c
	c.peers[p] = struct{}{}
	l.peers[p.client] = p
	for _, rr := range p.remote.byAddr {
		rk, err := l.w.UnpackRkey(c.ep, rr.packed)
		if err != nil {
			err = fmt.Errorf("%s: peer %s region %d: %w", l.name, p.name, rr.id, err)
			l.teardownPeer(p, err)
			return err
		}
		rr.rkey = rk
	}
	p.live = map[liveRegion]bool{}
	l.send(c, message{typ: msgHello, client: p.client, where: l.here, worker: l.address}, func(st ucxlib.Status) {
		if st != ucxlib.OK {
			l.connectFailed(p, fmt.Errorf("%s: hello to %s: %w", l.name, p.name, st.Error("ucp_am_send_nbx")))
		}
	})
	return nil
}

func (l *loop) connectFailed(p *peer, err error) {
	if !p.welcomed {
		p.welcomed = true
		p.welcome <- err
	}
}

// teardownPeer stops issuing to p, waits for its ops in flight (an
// endpoint flush), then says bye and destroys its rkeys. The endpoint
// stays: it is shared (see conn).
func (l *loop) teardownPeer(p *peer, err error) {
	if p.closing {
		return
	}
	p.closing = true
	if p.err == nil {
		p.err = err
	}
	l.connectFailed(p, err)
	delete(l.peers, p.client)
	if p.conn == nil { // never connected
		return
	}
	l.issue() // fail its queued ops now
	if p.conn.usable() != nil {
		p.drained = true // the endpoint's close completes what is in flight
		l.maybeRelease(p)
		return
	}
	l.flush(p.conn, func(ucxlib.Status) {
		p.drained = true
		l.maybeRelease(p)
	})
}

// maybeRelease finishes a torn-down peer once nothing of it is in flight.
func (l *loop) maybeRelease(p *peer) {
	if !p.closing || !p.drained || p.inflight > 0 || p.released {
		return
	}
	p.released = true
	c := p.conn
	if c.usable() == nil {
		l.send(c, message{typ: msgBye, client: p.client}, nil)
		l.destroyRkeys(p)
		delete(c.peers, p)
	}
	// Otherwise the endpoint is closing: its close destroys the rkeys.
}

// failPeer fails the ops in flight to a peer that made no progress for
// op_timeout or whose process exited. With peer error handling its
// endpoint is closed forcibly, which completes UCX's requests; otherwise
// the ops are reported failed and their slots (and local regions) stay
// held until UCX lets go.
func (l *loop) failPeer(p *peer, err error) {
	if p.err == nil {
		p.err = err
	}
	l.log.Warn(l.name+": failing a peer's ops in flight", zap.String("peer", p.name), zap.Int("inflight", p.inflight), zap.Error(err))
	if p.conn.peerErrors {
		l.connFailed(p.conn, err)
	}
	for s := range l.slots {
		sl := &l.slots[s]
		if sl.p != p || sl.abandoned {
			continue
		}
		switch sl.kind {
		case slotOp:
			sl.abandoned = true
			b := sl.b
			b.inflight--
			b.res[sl.i].Err = fmt.Errorf("%s: %s to %s: %w", l.name, b.ops[sl.i].Kind, p.name, p.err)
			l.maybeFinish(b)
			l.busyDec(p)
		case slotFlush:
			sl.abandoned = true
			sl.fn = nil
			b := sl.b
			b.flushing = false
			l.failWrites(b, fmt.Errorf("%s: WRITE to %s not confirmed: %w", l.name, p.name, p.err))
			l.finishBatch(b)
			l.busyDec(p)
		}
	}
	p.lastProgress = time.Now()
	l.issue()
}

// --- clients (this node as the owner of memory) ----------------------------------

func (l *loop) dropClient(cl *client) {
	if l.clients[cl.id] == cl {
		delete(l.clients, cl.id)
	}
	delete(cl.conn.clients, cl)
	for _, rv := range l.revokes {
		if rv.waiting[cl.id] == cl {
			delete(rv.waiting, cl.id)
			l.checkRevoke(rv)
		}
	}
}

// clientGone reports whether a client can no longer reach this node.
func (l *loop) clientGone(cl *client) bool {
	return cl.conn.err != nil || processGone(cl.conn)
}

// processGone reports whether the process at the other end of a
// connection without peer error handling, on this host and in this pid
// namespace, has exited: the way to notice a dead peer on UCX's
// shared-memory lanes.
func processGone(c *conn) bool {
	if c.peerErrors || !c.local || c.where.pid == 0 || int(c.where.pid) == os.Getpid() {
		return false
	}
	return errors.Is(unix.Kill(int(c.where.pid), 0), unix.ESRCH)
}

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
		for _, rr := range p.remote.byAddr {
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
		for _, rr := range p.remote.byAddr {
			rr.revoked = err
		}
	} else {
		for _, r := range m.regions {
			if rr := p.remote.byID[r.id]; rr != nil && rr.token == r.token {
				rr.revoked = fmt.Errorf("%s: region %d of peer %s was deregistered: %w", l.name, r.id, p.name, plugins.ErrUnknownRegion)
			}
		}
	}
	l.issue() // queued ops to revoked regions fail now
	l.flush(p.conn, func(ucxlib.Status) {
		l.send(p.conn, message{typ: msgAck, client: p.client, seq: m.seq}, nil)
	})
}

// startRevoke tells every client that regs (or, closing, everything) are
// gone and collects acknowledgements until deadline; then, if set, runs
// after the outcome is known.
func (l *loop) startRevoke(regs []liveRegion, reason uint8, deadline time.Time, then func(error)) *revocation {
	l.nextSeq++
	rv := &revocation{seq: l.nextSeq, waiting: map[uint64]*client{}, deadline: deadline, done: make(chan error, 1), then: then}
	l.revokes[rv.seq] = rv
	for _, cl := range l.clients {
		if cl.conn.usable() != nil {
			continue
		}
		rv.waiting[cl.id] = cl
		rest := regs
		for first := true; first || len(rest) > 0; first = false {
			n := min(len(rest), maxRegionsPerMessage)
			l.send(cl.conn, message{typ: msgRevoke, client: cl.id, seq: rv.seq, reason: reason, regions: rest[:n]}, nil)
			rest = rest[n:]
		}
	}
	l.checkRevoke(rv)
	return rv
}

func (l *loop) checkRevoke(rv *revocation) {
	if len(rv.waiting) == 0 {
		l.finishRevoke(rv, nil)
	}
}

func (l *loop) finishRevoke(rv *revocation, err error) {
	if rv.finished {
		return
	}
	rv.finished = true
	delete(l.revokes, rv.seq)
	rv.done <- err
	if rv.then != nil {
		rv.then(err)
	}
}

// abandonRevoke gives up on a revocation whose caller stopped waiting; the
// region stays registered with UCX until Close.
func (l *loop) abandonRevoke(rv *revocation, lm *localMem) {
	l.finishRevoke(rv, nil)
	l.leaked = append(l.leaked, lm)
}

// tick enforces deadlines: ops in flight without progress, revocations
// not acknowledged, clients whose process is gone.
func (l *loop) tick(now time.Time) {
	for p := range l.busy {
		switch {
		case processGone(p.conn):
			l.failPeer(p, fmt.Errorf("%s: peer %s: its process (pid %d) exited: %w", l.name, p.name, p.conn.where.pid, plugins.ErrPeerUnreachable))
		case now.Sub(p.lastProgress) > time.Duration(l.opts.OpTimeout):
			l.failPeer(p, fmt.Errorf("%s: peer %s made no progress for %v: %w", l.name, p.name, time.Duration(l.opts.OpTimeout), plugins.ErrTimeout))
		}
	}
	for _, rv := range l.revokes {
		for _, cl := range rv.waiting {
			if l.clientGone(cl) {
				l.dropClient(cl)
			}
		}
		if !rv.finished && now.After(rv.deadline) {
			ids := make([]string, 0, len(rv.waiting))
			for id := range rv.waiting {
				ids = append(ids, fmt.Sprintf("%016x", id))
			}
			l.finishRevoke(rv, fmt.Errorf("%d peer(s) (client ids %v) did not acknowledge in time: %w", len(ids), ids, plugins.ErrTimeout))
		}
	}
}

// --- close -----------------------------------------------------------------

// beginClose starts closing: queued ops fail, clients are told this node's
// regions are gone and acknowledge, peers are torn down (their ops in
// flight end), and the endpoints are closed; the loop exits when that is
// done or at the deadline.
func (l *loop) beginClose(deadline time.Time) {
	if l.closing {
		return
	}
	l.closing = true
	l.closeDeadline = deadline
	l.closePhase = closeRevoke
	l.issue()
	l.startRevoke(nil, revokeClosing, deadline, func(err error) {
		if err != nil {
			l.log.Warn(l.name+": closing without every peer's acknowledgement", zap.Error(err))
		}
		for _, p := range l.peers {
			l.teardownPeer(p, l.closedErr)
		}
		l.closePhase = closePeers
	})
}

// advanceClose moves the close along as its conditions are met.
func (l *loop) advanceClose() {
	late := time.Now().After(l.closeDeadline)
	if l.closePhase == closePeers {
		if len(l.busy) > 0 && !late {
			return
		}
		for _, c := range l.conns {
			l.closeConn(c, c.err != nil)
		}
		l.closePhase = closeConns
	}
	if l.closePhase != closeConns {
		return
	}
	closing := 0
	for _, c := range l.byEP {
		if !processGone(c) { // a dead process's endpoint never finishes closing
			closing++
		}
	}
	if closing == 0 || late {
		if closing > 0 {
			l.log.Warn(l.name+": endpoints still closing at the deadline", zap.Int("endpoints", closing))
		}
		l.exit = true
	}
}

// destroyUCX releases the rkeys, memory registrations, worker and context.
func (l *loop) destroyUCX() {
	for _, c := range l.byEP {
		for p := range c.peers {
			l.destroyRkeys(p)
		}
	}
	for _, lm := range l.mems {
		l.w.MemUnmap(lm.memh)
	}
	for _, lm := range l.leaked {
		l.w.MemUnmap(lm.memh)
	}
	l.w.Destroy()
}

// finish releases everything once the loop stopped: UCX first (so it lets
// go of memory), then what was still waiting on it.
func (l *loop) finish() {
	l.markStopped() // before the wake fd closes; queued commands run below
	if n := len(l.slots) - len(l.free); n > 0 {
		// UCX 1.13 asserts (and aborts the process) in ucp_worker_destroy
		// when an endpoint still has requests, which happens when a peer
		// without error handling died with ops in flight. Leak the worker
		// instead: it is never progressed again, so UCX touches no memory.
		l.log.Error(l.name+": UCX still holds requests at close (a peer died or did not answer); leaving the UCX worker allocated",
			zap.Int("requests", n))
		l.w.Abandon()
	} else {
		l.destroyUCX()
	}
	// UCX lets go of all memory now: fail what was in flight or queued.
	for s := range l.slots {
		sl := &l.slots[s]
		if sl.kind == slotOp {
			if !sl.abandoned && sl.b.res[sl.i].Err == nil {
				sl.b.res[sl.i].Err = fmt.Errorf("%s: %s to %s: %w", l.name, sl.b.ops[sl.i].Kind, sl.p.name, l.closedErr)
			}
			sl.b.release(sl.i)
		}
	}
	for b := range l.batches {
		for i := b.next; i < len(b.ops); i++ {
			if b.res[i].Err == nil {
				b.res[i].Err = l.closedErr
			}
		}
		l.failWrites(b, fmt.Errorf("%s: WRITE not confirmed: %w", l.name, l.closedErr))
		l.finishBatch(b)
	}
	l.runq = nil
	for _, rv := range l.revokes {
		l.finishRevoke(rv, l.closedErr)
	}
	for _, p := range l.peers {
		l.connectFailed(p, l.closedErr)
	}
	l.runCommands() // commands accepted before the stop: they see closing
}
