package ucxpath

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"time"

	"go.uber.org/zap"

	ucxlib "github.com/kvconnect/kvconnect/internal/ucx"
	"github.com/kvconnect/kvconnect/plugins"
)

// ctlSlots are the slots beyond max_inflight, for flushes, control
// messages and endpoint closes.
const ctlSlots = 256

// closeAckTimeout bounds how long Close waits for peers to acknowledge
// that this node's regions are gone (unless op_timeout or the context is
// shorter).
const closeAckTimeout = 5 * time.Second

const (
	epNone epState = iota
	epOpen
	epClosing
	epClosed
)

// localMem is a region registered with UCX.
type localMem struct {
	id    plugins.RegionID
	token uint64
	va    uintptr
	size  uint64
	memh  ucxlib.Mem
}

const (
	slotFree slotKind = iota
	slotOp
	slotFlush
	slotCtl
)

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
	dropped       uint64 // DroppedMessages when last logged
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
		backoffSleep(time.Millisecond)
	}
}

// backoffSleep is how backoff sleeps (a test records it instead).
var backoffSleep = time.Sleep

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

// --- batches ---------------------------------------------------------------

// --- completions and events --------------------------------------------------

// --- connections ---------------------------------------------------------------

// --- peers (this node as a client) ---------------------------------------------

// --- clients (this node as the owner of memory) ----------------------------------

// tick enforces deadlines: ops in flight without progress, revocations
// not acknowledged, clients whose process is gone.
func (l *loop) tick(now time.Time) {
	if d := l.w.DroppedMessages(); d != l.dropped {
		// A dropped welcome shows later as a Connect that timed out, a
		// dropped acknowledgement as a deregistration that did: say why.
		l.log.Warn(l.name+": UCX control messages dropped on receipt (queue full, too large, or out of memory)",
			zap.Uint64("dropped", d-l.dropped), zap.Uint64("total", d))
		l.dropped = d
	}
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
