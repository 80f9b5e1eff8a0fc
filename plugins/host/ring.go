package host

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/kvconnect/kvconnect/errdefs"
	"github.com/kvconnect/kvconnect/internal/pluginrpc"
	"github.com/kvconnect/kvconnect/internal/pluginrpc/proto"
	"github.com/kvconnect/kvconnect/internal/ring"
	"github.com/kvconnect/kvconnect/internal/shm"
	"github.com/kvconnect/kvconnect/internal/spin"
	"github.com/kvconnect/kvconnect/plugins"
)

// The goroutine polling the completion queue spins until maxPollSpin
// after its batch went in before it sleeps on the CQ's futex, so the
// plugin rarely needs to wake the host, while spinning pays: a
// spin.Chooser compares epochs of spinning and of sleeping by the round
// trips the host saw (docs/DATAPATH-ROUNDS.md, eighth round). It always spins
// at least pollSpin. A spin that finds it was descheduled goes on to its
// budget (spin.KeepOnPreempt): on a 2-vCPU machine what preempts the
// host is mostly its own plugin or the peer doing the batch, and a host
// that slept then cost the plugin a wake-up for the completion and, in
// turn, a missed spin for the next submission (docs/DATAPATH-ROUNDS.md, tenth
// round).
const (
	pollSpin    = 5 * time.Microsecond
	maxPollSpin = 100 * time.Microsecond
)

// ringSleep bounds one futex sleep of the poller, so a wake-up lost to a
// race with its context ending costs at most this much.
const ringSleep = 5 * time.Millisecond

// ringLayout is the geometry of new rings (tests use smaller ones).
var ringLayout = ring.DefaultLayout

// errNotForRing tells Transfer a batch does not fit the ring (too large,
// or empty): it goes over gRPC.
var errNotForRing = errors.New("batch not for the ring")

// ringClient is the host's end of a plugin's ring (internal/ring):
// Transfer writes a batch's ops into the arena, submits it on the SQ and
// waits for its completion on the CQ, with no gRPC call and, while both
// sides are busy, no system call.
//
// Concurrency: transfer may be called from many goroutines, and close at
// any time. mu guards the arena allocator, pending and every batch in
// it, polling, reaping and dead; subMu orders submissions and guards
// sqTail. One waiting goroutine at a time polls the CQ (the poller, the
// holder of polling): it dispatches every completion it finds, its own
// batch's or others', and hands the role to another waiter when it
// leaves; the others park on their batch's wake channel. A batch whose
// waiter left early (its context ended) stays pending as a zombie until
// its completion comes, since the plugin may still write its area, and a
// reaper goroutine polls for zombies when no waiter does. cqHead is
// touched only by the poller (the role passes under mu).
//
// Nothing the plugin writes is trusted: every completion's batch id,
// record, index, count and message is checked (ring.DecodeResults), and
// a plugin that breaks the protocol breaks only its ring: the batches in
// flight fail with ErrProtocol and later ones go over gRPC.
type ringClient struct {
	name   string
	log    *zap.Logger
	seg    *shm.Segment
	bell   *ring.Doorbell // nil: the ring has none
	r      *ring.Shared
	l      ring.Layout
	kinds  ring.Kinds
	maxOps int
	// crashed explains a plugin process that went away (nil in memory).
	crashed func() (string, error)
	rtt     *spin.Adapt // batches' round trips, for the poller's spin
	stats   ringStats
	yield   func() // runtime.Gosched, but in tests

	subMu  sync.Mutex
	sqTail uint32

	cqHead uint32 // the poller's

	mu      sync.Mutex
	used    []uint64 // arena slots in use, one bit each
	pending map[uint64]*ringBatch
	live    int // pending batches with a waiter
	nextID  uint64
	polling bool
	reaping bool
	space   chan struct{} // closed (and replaced) when a batch leaves pending and spaceWaiters > 0
	// spaceWaiters counts submitters waiting for room.
	spaceWaiters int
	dead         chan struct{} // closed when the ring stops: deadErr says why
	deadErr      error
	users        sync.WaitGroup // transfers and the reaper, which read the ring
	stopped      chan struct{}  // closed by close, for watch
	once         sync.Once
}

// ringStats count how waits ended, for the debug log at close.
type ringStats struct {
	batches, caught, slept, woken, handoffs atomic.Int64
}

// ringBatch is a batch in the ring. Guarded by ringClient.mu.
type ringBatch struct {
	id      uint64
	area    ring.Area
	slot    int // first arena slot
	slots   int
	results []plugins.OpResult // the caller's; nil once a zombie
	start   time.Time          // when it was submitted
	err     error              // the batch-level error, once done
	done    bool
	wake    chan struct{} // cap 1: done, or take over polling
}

// openRing sets up a ring with the plugin after Init, when the plugin's
// SDK supports it and rings are not turned off; on any failure the
// client keeps using Transfer over gRPC.
func (c *grpcClient) openRing(ctx context.Context) {
	if !ring.Supported || os.Getenv(pluginrpc.EnvRings) == "0" || c.features.Load()&pluginrpc.FeatureRings == 0 {
		return
	}
	l := ringLayout()
	seg, err := shm.NewLazy("ring", l.Size())
	if err != nil {
		c.logger().Warn("cannot create the plugin's ring; batches go over gRPC", zap.Error(err))
		return
	}
	r, err := ring.Attach(seg.Bytes(), l)
	if err != nil {
		seg.Close()
		c.logger().Warn("cannot set up the plugin's ring; batches go over gRPC", zap.Error(err))
		return
	}
	r.WriteHeader()
	kinds := errdefs.KindNames()
	// A doorbell when the plugin takes one (pluginrpc.FeatureDoorbell):
	// without it, everything works through the SQ's futex.
	var bell *ring.Doorbell
	if c.features.Load()&pluginrpc.FeatureDoorbell != 0 {
		if bell, err = ring.NewDoorbell(); err != nil {
			c.logger().Debug("no doorbell for the plugin's ring; its sleeper sleeps on the futex only", zap.Error(err))
		}
	}
	req := &proto.OpenRingRequest{Version: ring.Version, SqEntries: l.SQEntries, CqEntries: l.CQEntries, SlotSize: l.SlotSize,
		ArenaSlots: l.ArenaSlots, Kinds: kinds}
	c.regMu.Lock() // keeps the fd tokens in order with registrations'
	req.FdToken, err = c.fds.Send(seg.File())
	if err == nil && bell != nil {
		req.DoorbellFdToken, err = c.fds.Send(bell.File())
	}
	if err == nil {
		_, err = c.rpc.OpenRing(ctx, req)
	}
	c.regMu.Unlock()
	if err != nil {
		seg.Close()
		if bell != nil {
			bell.Close()
		}
		err = c.fromStatus(ctx, "open ring", err)
		if errors.Is(err, errdefs.ErrNotSupported) {
			c.logger().Debug("the plugin serves no ring; batches go over gRPC", zap.Error(err))
		} else {
			c.logger().Warn("the plugin refused the ring; batches go over gRPC", zap.Error(err))
		}
		return
	}
	if bell != nil {
		r.SetDoorbell(bell)
	}
	rc := &ringClient{name: c.name, log: c.logger(), seg: seg, bell: bell, r: r, l: l, kinds: ring.NewKinds(kinds), maxOps: l.MaxOps(),
		crashed: c.crashed, rtt: spin.NewChoosing(ring.EnvHostSpin, maxPollSpin), yield: runtime.Gosched, used: make([]uint64, (l.ArenaSlots+63)/64), pending: map[uint64]*ringBatch{},
		space: make(chan struct{}), dead: make(chan struct{}), stopped: make(chan struct{})}
	c.ringMu.Lock()
	defer c.ringMu.Unlock()
	if c.ringShut {
		// Close ran while OpenRing was under way: the plugin has stopped
		// its end; this one goes too, unpublished.
		rc.close()
		return
	}
	c.ring.Store(rc)
	go rc.watch(c.exited)
}

func (c *grpcClient) logger() *zap.Logger {
	if c.log == nil {
		return zap.NewNop()
	}
	return c.log
}

// closeRing stops the ring, if one is open, and any ring whose opening
// is under way.
func (c *grpcClient) closeRing() {
	c.ringMu.Lock()
	c.ringShut = true
	rc := c.ring.Swap(nil)
	c.ringMu.Unlock()
	if rc != nil {
		rc.close()
	}
}

// watch stops the ring when the plugin process exits: every waiter is
// woken and fails with ErrTransportCrashed, at once rather than at its
// timeout.
func (rc *ringClient) watch(exited <-chan struct{}) {
	select {
	case <-exited:
		why, err := "the plugin process exited", errdefs.ErrTransportCrashed
		if rc.crashed != nil {
			if w, e := rc.crashed(); e != nil {
				why, err = w, e
			}
		}
		rc.stop(fmt.Errorf("plugin %s: transfer: %s: %w", rc.name, why, err))
	case <-rc.stopped:
	}
}

// usable reports whether batches may go through the ring.
func (rc *ringClient) usable() bool {
	select {
	case <-rc.dead:
		return false
	default:
		return true
	}
}

// stop ends the ring with err: every batch pending fails with it, and
// every waiter wakes. The first reason sticks.
func (rc *ringClient) stop(err error) {
	rc.mu.Lock()
	if rc.deadErr == nil {
		rc.deadErr = err
		close(rc.dead)
	}
	rc.mu.Unlock()
	rc.r.Wake(ring.CQTail)
}

// breakRing stops the ring because the plugin broke its protocol.
func (rc *ringClient) breakRing(err error) {
	rc.log.Error("the plugin broke the ring protocol; its batches in flight fail and later ones go over gRPC", zap.Error(err))
	rc.stop(fmt.Errorf("plugin %s: transfer: %w", rc.name, err))
}

// close stops the ring (batches pending fail with ErrClosed), waits for
// every goroutine that reads it, and unmaps it. It is idempotent.
func (rc *ringClient) close() {
	rc.once.Do(func() {
		rc.r.Store(ring.HostState, ring.HostClosing)
		rc.stop(fmt.Errorf("plugin %s: transfer: the transport was closed: %w", rc.name, errdefs.ErrClosed))
		close(rc.stopped)
		rc.users.Wait()
		rc.log.Debug("ring closed", zap.Int64("batches", rc.stats.batches.Load()), zap.Int64("caught_spinning", rc.stats.caught.Load()),
			zap.Int64("slept", rc.stats.slept.Load()), zap.Int64("woken", rc.stats.woken.Load()), zap.Int64("handoffs", rc.stats.handoffs.Load()),
			zap.Duration("mean_round_trip", rc.rtt.Mean()), zap.Any("spin", rc.rtt.Stats()), zap.Any("choice", rc.rtt.Choose.Choice()))
		rc.seg.Close()
		if rc.bell != nil {
			rc.bell.Close()
		}
	})
}

// transfer runs a batch through the ring. It returns errNotForRing,
// touching nothing, for a batch the arena cannot hold and for an empty
// one (the plugin's Transfer still answers it: a bad peer, a closed
// transport).
func (rc *ringClient) transfer(ctx context.Context, peer plugins.PeerID, ops []plugins.Op, results []plugins.OpResult) error {
	if len(ops) > rc.maxOps || len(ops) == 0 {
		return errNotForRing
	}
	if ctx.Err() != nil {
		// Nothing of it is sent.
		err := givenUpError(rc.name, ctx)
		plugins.FillResults(results, err)
		return err
	}
	b, err := rc.submit(ctx, peer, ops, results)
	if err != nil {
		plugins.FillResults(results, err)
		return err
	}
	defer rc.users.Done()
	return rc.wait(ctx, b)
}

// submit reserves the batch's area (waiting while the arena or the CQ is
// full: backpressure, never a drop), writes its ops and publishes it.
func (rc *ringClient) submit(ctx context.Context, peer plugins.PeerID, ops []plugins.Op, results []plugins.OpResult) (*ringBatch, error) {
	n := len(ops)
	need := (ring.AreaSize(n) + int(rc.l.SlotSize) - 1) / int(rc.l.SlotSize)
	rc.mu.Lock()
	slot := -1
	for {
		if rc.deadErr != nil {
			err := rc.deadErr
			rc.mu.Unlock()
			return nil, err
		}
		if len(rc.pending) < int(rc.l.CQEntries) {
			if slot = rc.allocLocked(need); slot >= 0 {
				break
			}
		}
		space := rc.space
		rc.spaceWaiters++
		rc.mu.Unlock()
		var err error
		select {
		case <-space:
		case <-rc.dead:
		case <-ctx.Done():
			err = fmt.Errorf("plugin %s: transfer: waiting for room in the ring: %w", rc.name, errdefs.FromContext(ctx.Err()))
		}
		rc.mu.Lock()
		rc.spaceWaiters--
		if err != nil {
			rc.mu.Unlock()
			return nil, err
		}
	}
	rc.nextID++
	off := uint64(slot) * uint64(rc.l.SlotSize)
	b := &ringBatch{id: rc.nextID, slot: slot, slots: need, results: results, wake: make(chan struct{}, 1), start: time.Now()}
	b.area, _ = ring.AreaAt(rc.r.Arena(), off, n) // fits: allocated above
	rc.pending[b.id] = b
	rc.live++
	rc.stats.batches.Add(1)
	rc.users.Add(1)
	rc.mu.Unlock()
	for i := range ops {
		b.area.PutOp(i, opToWire(&ops[i]))
	}
	var timeout int64
	if dl, ok := ctx.Deadline(); ok {
		timeout = max(int64(time.Until(dl)), 1)
	}
	if err := rc.push(ctx, ring.Sub{Op: ring.OpBatch, NOps: uint32(n), ID: b.id, Peer: uint64(peer), Area: off, Timeout: timeout}, true); err != nil {
		rc.mu.Lock()
		rc.dropLocked(b)
		rc.mu.Unlock()
		rc.users.Done()
		return nil, err
	}
	return b, nil
}

// push publishes one submission. The SQ holds twice the batches that can
// be in flight, so it is full only when the plugin stopped reading it:
// a batch then waits (bounded by ctx), a cancellation is dropped (the
// plugin's own deadline for the batch still holds).
func (rc *ringClient) push(ctx context.Context, e ring.Sub, wait bool) error {
	rc.subMu.Lock()
	for {
		head := rc.r.Load(ring.SQHead)
		used := rc.sqTail - head
		if used < rc.l.SQEntries {
			break
		}
		rc.subMu.Unlock()
		if used > rc.l.SQEntries {
			err := fmt.Errorf("ring: the plugin consumed submissions that were never published (SQ head %d, tail %d): %w", head, rc.sqTail, errdefs.ErrProtocol)
			rc.breakRing(err)
			return fmt.Errorf("plugin %s: transfer: %w", rc.name, err)
		}
		if !wait {
			return nil
		}
		select {
		case <-rc.dead:
			return rc.deadError()
		case <-ctx.Done():
			return fmt.Errorf("plugin %s: transfer: waiting for room in the ring: %w", rc.name, errdefs.FromContext(ctx.Err()))
		case <-time.After(50 * time.Microsecond):
		}
		rc.subMu.Lock()
	}
	ring.PutSub(rc.r.Sub(rc.sqTail), e)
	rc.sqTail++
	rc.r.Store(ring.SQTail, rc.sqTail)
	rc.subMu.Unlock()
	rc.r.NotifySQ()
	return nil
}

func (rc *ringClient) deadError() error {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.deadErr
}

// wait waits for b's completion, polling the CQ itself when no one else
// does. When ctx ends first, the plugin is asked to cancel b and wait
// waits up to givenUpWait more for it to report: ops that failed then
// carry ctx's error, ops the plugin completed stay completed. The
// caller's ctx having ended is the reason given also when the ring stops
// meanwhile, as over gRPC.
func (rc *ringClient) wait(ctx context.Context, b *ringBatch) error {
	rc.mu.Lock()
	results := b.results // nil'ed only by giveUp, below
	rc.mu.Unlock()
	end, err := rc.waitDone(ctx, b)
	if end == endCompleted || end == endRingStopped {
		return err
	}
	rc.push(ctx, ring.Sub{Op: ring.OpCancel, ID: b.id}, false)
	grace, cancel := context.WithTimeout(context.WithoutCancel(ctx), givenUpWait)
	defer cancel()
	if end, err = rc.waitDone(grace, b); end == endCtx {
		var gaveUp bool
		if err, gaveUp = rc.giveUp(ctx, b); gaveUp {
			rc.log.Warn("the plugin did not report a batch whose context ended; Transfer returns without it, and a WRITE of it may still land",
				zap.String("plugin", rc.name), zap.Uint64("batch", b.id), zap.Duration("waited", givenUpWait), zap.Error(err))
			return err
		}
		_, err = rc.waitDone(grace, b) // it completed (or the ring stopped) as the wait ended
	}
	// A ring stopped meanwhile failed every op: they get ctx's error too.
	return givenUp(rc.name, ctx, results, err)
}

// How waitDone ended.
type waitEnd int

const (
	endCompleted   waitEnd = iota // the plugin reported the batch: err is its outcome
	endRingStopped                // the ring stopped: err says why, and the results carry it
	endCtx                        // ctx ended first: the batch is still pending
)

// waitDone waits for b's completion until ctx ends, polling the CQ when
// no one else does.
func (rc *ringClient) waitDone(ctx context.Context, b *ringBatch) (waitEnd, error) {
	for {
		rc.mu.Lock()
		if b.done {
			err := b.err
			rc.mu.Unlock()
			return endCompleted, err
		}
		if rc.deadErr != nil {
			err, results := rc.deadErr, b.results
			rc.dropLocked(b)
			rc.mu.Unlock()
			plugins.FillResults(results, err)
			return endRingStopped, err
		}
		if ctx.Err() != nil {
			rc.mu.Unlock()
			return endCtx, nil
		}
		if !rc.polling {
			rc.polling = true
			rc.mu.Unlock()
			rc.poll(ctx, b)
			rc.mu.Lock()
			rc.polling = false
			rc.handoffLocked(b)
			rc.mu.Unlock()
			continue
		}
		rc.mu.Unlock()
		select {
		case <-b.wake:
		case <-rc.dead:
		case <-ctx.Done():
		}
	}
}

// giveUp ends the wait of a batch whose context ended and whose plugin
// did not report it within givenUpWait: unless it just completed, it
// becomes a zombie (freed when its completion comes), and its results
// carry the context's error.
func (rc *ringClient) giveUp(ctx context.Context, b *ringBatch) (error, bool) {
	rc.mu.Lock()
	if b.done || rc.deadErr != nil {
		rc.mu.Unlock()
		return nil, false // the caller returns its outcome
	}
	results := b.results
	b.results = nil
	rc.live--
	rc.handoffLocked(nil)
	rc.mu.Unlock()
	err := fmt.Errorf("plugin %s: transfer: %w", rc.name, errdefs.FromContext(ctx.Err()))
	plugins.FillResults(results, err)
	return err, true
}

// handoffLocked makes sure someone polls while batches are pending: a
// waiter other than leaving takes over, or the reaper starts for zombies.
func (rc *ringClient) handoffLocked(leaving *ringBatch) {
	if rc.polling || len(rc.pending) == 0 || rc.deadErr != nil {
		return
	}
	if rc.live > 0 {
		for _, o := range rc.pending {
			if o != leaving && !o.done && o.results != nil {
				select {
				case o.wake <- struct{}{}:
				default:
				}
				rc.stats.handoffs.Add(1)
				return
			}
		}
	}
	if !rc.reaping {
		rc.reaping = true
		rc.users.Add(1)
		go rc.reap()
	}
}

// reap polls for zombies' completions while no waiter does.
func (rc *ringClient) reap() {
	defer rc.users.Done()
	for {
		rc.mu.Lock()
		if rc.polling || len(rc.pending) == 0 || rc.live > 0 || rc.deadErr != nil {
			rc.reaping = false
			rc.handoffLocked(nil)
			rc.mu.Unlock()
			return
		}
		rc.polling = true
		rc.mu.Unlock()
		rc.poll(context.Background(), nil)
		rc.mu.Lock()
		rc.polling = false
		rc.mu.Unlock()
	}
}

// poll dispatches completions until b is done (b nil: until no zombie is
// left or a waiter can take over), ctx ends or the ring stops: it spins
// until its budget after b's submission (at least pollSpin), then sleeps
// on the CQ's futex.
func (rc *ringClient) poll(ctx context.Context, b *ringBatch) {
	// What wakes a sleep when ctx ends is registered before the first
	// sleep, not here: a batch caught spinning, the usual small one,
	// allocates nothing for it (context.AfterFunc: about 500 bytes and
	// the context's Done channel).
	var stop func() bool
	defer func() {
		if stop != nil {
			stop()
		}
	}()
	yield := spin.MayYield(ctx)
	over := func() bool {
		rc.mu.Lock()
		defer rc.mu.Unlock()
		if rc.deadErr != nil || ctx.Err() != nil {
			return true
		}
		if b == nil {
			return len(rc.pending) == 0 || rc.live > 0
		}
		return b.done
	}
	for {
		rc.drain()
		if over() {
			return
		}
		seen := rc.cqHead
		until := time.Now().Add(pollSpin)
		if budget := rc.rtt.Budget(); b != nil && b.start.Add(budget).After(until) {
			until = b.start.Add(budget)
		} else if budget == 0 {
			until = time.Time{}
		}
		sp := spin.Until(until, rc.rtt)
		sp.KeepOnPreempt()
		if !yield {
			sp.Locked()
		}
		for rc.r.Load(ring.CQTail) == seen && sp.Spin() {
		}
		sp.Done()
		if rc.r.Load(ring.CQTail) != seen {
			rc.stats.caught.Add(1)
		} else {
			rc.stats.slept.Add(1)
			// Let what is runnable here run before this thread blocks
			// (unless this goroutine is locked to its thread: then a
			// yield is two thread hand-offs, spin.WithoutYield).
			if yield {
				rc.yield()
			}
			if stop == nil {
				stop = context.AfterFunc(ctx, func() { rc.r.Wake(ring.CQTail) })
			}
			// Brief: handing the processor off (ring.Handoff) while batches
			// were pending cost more switches and gained no GB/s
			// (DATAPATH-ROUNDS.md, fifteenth round).
			rc.r.Sleep(ring.CQTail, seen, ring.CQIdle, func() bool { return ctx.Err() != nil || !rc.usable() }, ringSleep, ring.Brief)
			if rc.r.Load(ring.CQTail) != seen {
				rc.stats.woken.Add(1)
			}
		}
	}
}

// drain dispatches every completion published.
func (rc *ringClient) drain() {
	tail := rc.r.Load(ring.CQTail)
	if tail == rc.cqHead {
		return
	}
	if tail-rc.cqHead > rc.l.CQEntries {
		rc.breakRing(errCQAhead(tail, rc.l.CQEntries, rc.cqHead))
		return
	}
	for ; rc.cqHead != tail; rc.cqHead++ {
		if err := rc.complete(ring.GetComp(rc.r.Comp(rc.cqHead))); err != nil {
			rc.breakRing(err)
			return
		}
	}
	rc.r.Store(ring.CQHead, rc.cqHead)
}

// complete applies one completion: a waiter's batch gets its results, a
// zombie is freed.
func (rc *ringClient) complete(c ring.Comp) error {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	b := rc.pending[c.ID]
	if b == nil {
		return errNotInFlight(c.ID)
	}
	// The mean time the plugin takes to publish (its stamp: only a
	// hint) is for diagnostics; whether to spin is decided by the whole
	// wait as this process saw it, noticing included (Took).
	if posted := c.Posted - b.start.UnixNano(); posted > 0 && c.Posted <= time.Now().UnixNano() {
		rc.rtt.Observe(time.Duration(posted))
	}
	if b.results != nil {
		rc.rtt.Took(time.Since(b.start))
		plugins.FillResults(b.results, nil)
		if c.NRec != 0 || c.Flags&ring.FlagBatchError != 0 {
			if perr := rc.failures(b, c); perr != nil {
				return perr
			}
		}
		b.done = true
	}
	rc.dropLocked(b)
	return nil
}

// failures applies the records of a batch with failures; a protocol
// error fails the whole batch. It is out of line (its frame is large;
// complete runs on fresh goroutine stacks).
//
//go:noinline
func (rc *ringClient) failures(b *ringBatch, c ring.Comp) error {
	results := b.results
	batchErr, perr := ring.DecodeResults(b.area, c, rc.kinds, "plugin "+rc.name, func(i int, err error) { results[i].Err = err })
	if perr != nil {
		perr = fmt.Errorf("plugin %s: transfer: %w", rc.name, perr)
		plugins.FillResults(results, perr)
		b.err = perr
		b.done = true
		rc.dropLocked(b)
		return perr
	}
	b.err = batchErr
	return nil
}

//go:noinline
func errNotInFlight(id uint64) error {
	return fmt.Errorf("ring: completion of batch %d, which is not in flight: %w", id, errdefs.ErrProtocol)
}

//go:noinline
func errCQAhead(tail, entries, head uint32) error {
	return fmt.Errorf("ring: CQ tail %d is more than the queue's %d entries ahead of the %d completions read: %w", tail, entries, head, errdefs.ErrProtocol)
}

// dropLocked takes b out of pending and frees its area, waking its
// waiter and whoever waits for room.
func (rc *ringClient) dropLocked(b *ringBatch) {
	if rc.pending[b.id] != b {
		return
	}
	delete(rc.pending, b.id)
	if b.results != nil {
		rc.live--
		if !b.done {
			b.results = nil
		}
	}
	for i := b.slot; i < b.slot+b.slots; i++ {
		rc.used[i/64] &^= 1 << (i % 64)
	}
	select {
	case b.wake <- struct{}{}:
	default:
	}
	if rc.spaceWaiters > 0 {
		close(rc.space)
		rc.space = make(chan struct{})
	}
}

// allocLocked reserves n contiguous arena slots, first fit, and returns
// the first, or -1.
func (rc *ringClient) allocLocked(n int) int {
	total := int(rc.l.ArenaSlots)
	if n == 1 {
		for w, bitsUsed := range rc.used {
			if bitsUsed != ^uint64(0) {
				i := w*64 + bits.TrailingZeros64(^bitsUsed)
				if i >= total {
					return -1
				}
				rc.used[w] |= 1 << (i % 64)
				return i
			}
		}
		return -1
	}
	run := 0
	for i := 0; i < total; i++ {
		if rc.used[i/64]&(1<<(i%64)) != 0 {
			run = 0
			continue
		}
		if run++; run == n {
			first := i - n + 1
			for j := first; j <= i; j++ {
				rc.used[j/64] |= 1 << (j % 64)
			}
			return first
		}
	}
	return -1
}

// DataPath says how batches reach transport t: "ring" (shared-memory
// queues), "grpc" (a Transfer call per batch: rings off, unsupported, or
// stopped after a protocol error), or "" when t is not served by this
// package (an in-process transport).
func DataPath(t plugins.Transport) string {
	c := clientOf(t)
	if c == nil {
		return ""
	}
	if rc := c.ring.Load(); rc != nil && rc.usable() {
		return "ring"
	}
	return "grpc"
}

// clientOf is the gRPC client behind t, or nil when t is not served by
// this package (or is a nil *Plugin: a connector's in-process transport).
func clientOf(t plugins.Transport) *grpcClient {
	switch v := t.(type) {
	case *Plugin:
		if v != nil {
			return v.grpcClient
		}
	case *inMemory:
		if v != nil {
			return v.grpcClient
		}
	}
	return nil
}
