package plugins

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/kvconnect/kvconnect/errdefs"
	"github.com/kvconnect/kvconnect/internal/ring"
	"github.com/kvconnect/kvconnect/internal/shm"
	"github.com/kvconnect/kvconnect/internal/spin"
)

// A worker that just published a completion spins on the submission
// queue for the host's next batch, for up to maxWorkerSpin while at
// least half of its recent tries caught one (spin.Adapt), before it
// leaves: back-to-back batches then cost no wake-up and no goroutine.
//
// It spins whether or not the host's poller was awake to see the
// completion. It used not to when the host slept (the host needs a
// wake-up before it can submit again, and the processor seemed better
// left to it), but that made sleeping a trap: a host asleep for one op
// found the plugin asleep for its next, whose wake-up made the host's
// next spin miss too, and a run stayed in that state (4 KiB single
// WRITE through the tcp plugin, AMD EPYC VM, 2 vCPUs: p50 38–111 µs
// from run to run, against 36–40 µs spinning either way;
// docs/DATAPATH-ROUNDS.md, tenth round). The host wakes on the other
// processor, or preempts this spin, which then stops.
const maxWorkerSpin = 50 * time.Microsecond

// workerYield spaces the worker's yields while it spins for the host's
// next batch. Between two batches the host's caller does its own work
// (a Python engine's wrapper, a serving loop's bookkeeping), and a
// spinner that yields every 2048 checks (2–3 µs here) yields several
// times per gap; each runtime.Gosched wakes a second thread of the
// plugin (wakep) onto the vCPU the host or the peer needs. One 4 KiB
// write from a C loop against a Go target, AMD EPYC VM, 2 vCPUs: p50
// 36.6 µs with no work between ops, 47–51 µs with 3–8 µs of it; with
// yields 20 µs apart 36.2–37.3 µs either way, and the Python engine's
// transfer_sync_write 36–40 µs against 43–51
// (docs/DATAPATH-ROUNDS.md, thirty-first round).
const workerYield = 20 * time.Microsecond

// ringStopWait bounds how long stop waits for batches whose Transfer
// ignores its canceled context.
const ringStopWait = 10 * time.Second

// ringServer serves one ring (internal/ring) on the plugin side: it
// claims submissions from the SQ, runs each batch through the
// transport's Transfer with a context that ends at the batch's timeout
// or when the host cancels it, and publishes the outcome on the CQ.
//
// Goroutines: one sleeper waits for submissions when nothing else
// watches the SQ (on the SQ tail's futex, or, while batches come
// concurrently and the ring has a doorbell, on the doorbell); it runs a
// lone batch itself (SQBusy raised), or starts a worker for each batch
// it claims when batches come concurrently (alone); while it is busy,
// the standby is woken for what the host submits (SQKick); a worker (or the sleeper, after its batch) publishes
// the completion, then spins on the SQ for a while and runs what it
// claims itself. claimMu makes claiming one
// consumer at a time (and orders head); postMu orders completions (and
// guards cqTail); mu guards running. Everything read from the ring is
// checked before use: a host that breaks the protocol stops the ring,
// never the process.
type ringServer struct {
	impl  Transport
	log   *zap.Logger
	seg   *shm.Segment
	r     *ring.Shared
	l     ring.Layout
	kinds ring.Kinds
	// gap learns the host's think time: from a completion to the next
	// submission, for the workers' spin.
	gap      *spin.Adapt
	lastPost atomic.Int64 // unix ns of the last completion
	// counts, for the debug log at stop and RingStats (grpcstats.go)
	bySleeper, bySpinner, byStandby, spinMisses, inline, bySleeperBell atomic.Int64
	// concurrentUntil (unix ns): until then the sleeper starts a worker
	// per batch rather than run a lone one itself (alone).
	concurrentUntil atomic.Int64
	transferTime    spin.Adapt // Transfer's duration

	claimMu sync.Mutex
	head    uint32        // next SQ entry to claim; guarded by claimMu
	seen    atomic.Uint32 // head, for spinners' lock-free looks

	postMu sync.Mutex
	cqTail uint32 // guarded by postMu

	mu      sync.Mutex
	running map[uint64]context.CancelFunc // batches claimed and not completed

	// bell is the ring's doorbell, or nil: the sleeper waits on it while
	// batches come concurrently (sleeper).
	bell *ring.Doorbell

	ctx      context.Context // ends when the ring stops: every batch's parent
	cancel   context.CancelFunc
	stopping atomic.Bool
	wg       sync.WaitGroup // the sleeper and the workers
	stopOnce sync.Once
}

// job is a claimed batch: its submission, context and any reason it
// cannot run.
type job struct {
	sub    ring.Sub
	ctx    context.Context
	cancel context.CancelFunc
	bad    error
	// inline: the sleeper runs it, and tail is the SQ tail when it
	// started, for alone's sign of concurrent submitters.
	inline bool
	tail   uint32
}

func newRingServer(impl Transport, log *zap.Logger, seg *shm.Segment, r *ring.Shared, kinds []string, bell *ring.Doorbell) *ringServer {
	// The host's poller spins for each batch's completion: transports
	// need not spin for their peers too (CompletionPolled).
	ctx, cancel := context.WithCancel(WithCompletionPolled(context.Background()))
	s := &ringServer{impl: impl, log: log, seg: seg, r: r, l: r.Layout(), kinds: ring.NewKinds(kinds), gap: spin.NewAdapt(ring.EnvPluginSpin, maxWorkerSpin),
		running: map[uint64]context.CancelFunc{}, ctx: ctx, cancel: cancel, bell: bell}
	s.head = r.Load(ring.SQHead)
	s.seen.Store(s.head)
	s.cqTail = r.Load(ring.CQTail)
	r.Store(ring.PluginState, ring.PluginServing)
	s.wg.Add(2)
	go s.sleeper()
	go s.standby()
	return s
}

// claim takes every submission published and not yet claimed into jobs:
// batches get their contexts (registered in running, so a cancellation
// behind them finds them); cancellations are applied at once. A broken
// SQ (a tail more than a queue ahead) stops the ring.
func (s *ringServer) claim(jobs []job) []job {
	s.claimMu.Lock()
	defer s.claimMu.Unlock()
	if s.stopping.Load() {
		return jobs
	}
	tail := s.r.Load(ring.SQTail)
	if tail == s.head {
		return jobs
	}
	if tail-s.head > s.l.SQEntries {
		s.fail(fmt.Errorf("plugin ring: the host published SQ tail %d with %d entries consumed, more than the queue's %d: %w", tail, s.head, s.l.SQEntries, errdefs.ErrProtocol))
		return jobs
	}
	if last := s.lastPost.Swap(0); last != 0 {
		if gap := time.Duration(time.Now().UnixNano() - last); gap < 10*time.Millisecond {
			s.gap.Observe(gap)
		}
	}
	for ; s.head != tail; s.head++ {
		e := ring.GetSub(s.r.Sub(s.head))
		if e.Op == ring.OpCancel {
			s.mu.Lock()
			if cancel := s.running[e.ID]; cancel != nil {
				cancel()
			}
			s.mu.Unlock()
			continue
		}
		j := job{sub: e, bad: s.l.CheckSub(e)}
		parent := s.ctx
		if j.bad == nil && e.Timeout > 0 {
			j.ctx, j.cancel = context.WithTimeout(parent, time.Duration(e.Timeout))
		} else {
			j.ctx, j.cancel = context.WithCancel(parent)
		}
		s.mu.Lock()
		if _, dup := s.running[e.ID]; dup && j.bad == nil {
			j.bad = fmt.Errorf("plugin ring: batch %d submitted while it runs: %w", e.ID, errdefs.ErrProtocol)
		} else if j.bad == nil {
			s.running[e.ID] = j.cancel
		}
		s.mu.Unlock()
		jobs = append(jobs, j)
	}
	s.r.Store(ring.SQHead, s.head)
	s.seen.Store(s.head)
	return jobs
}

// testBeforeLastLook, when a test sets it (before the ring server
// starts), runs between the sleeper's claim of a lone batch and its last
// look at the SQ: a host submitting in between.
var testBeforeLastLook func()

// sleeper claims submissions when no worker is spinning, sleeping on the
// SQ's futex in between. A lone batch it runs itself, on the thread the
// futex woke, when nothing suggests other host threads submit meanwhile
// (see alone); otherwise it starts a worker per batch, so batches from
// concurrent submitters run concurrently.
func (s *ringServer) sleeper() {
	defer s.wg.Done()
	var buf [8]job
	for !s.stopping.Load() {
		jobs := s.claim(buf[:0])
		if len(jobs) == 0 {
			if w := s.sleepWait(); w == ring.Handoff && s.bell != nil {
				// Concurrent batches: the doorbell, whose wake-up goes
				// through the runtime's poller and, unlike a futex's,
				// leaves its monitor (sysmon) asleep.
				s.bySleeperBell.Add(1)
				s.r.SleepOnBell(s.bell, s.seen.Load(), s.stopping.Load)
			} else {
				s.r.Sleep(ring.SQTail, s.seen.Load(), ring.SQIdle, s.stopping.Load, 0, w)
			}
			continue
		}
		if len(jobs) == 1 && s.alone() {
			// Busy, then a last look: what the host published before it
			// could see the sleeper busy goes to workers with this batch.
			s.r.Store(ring.SQBusy, 1)
			if testBeforeLastLook != nil {
				testBeforeLastLook()
			}
			if jobs = s.claim(jobs); len(jobs) == 1 {
				s.bySleeper.Add(1)
				s.inline.Add(1)
				s.serve(jobs[0], true)
				continue
			}
			s.r.Store(ring.SQBusy, 0)
		}
		// Counted after the last look, which may have claimed more (and
		// before any runs: a completion the host sees is counted).
		s.bySleeper.Add(int64(len(jobs)))
		s.sawConcurrency()
		for _, j := range jobs {
			s.wg.Add(1)
			go s.work(j)
		}
		// Let the workers start on this processor before this thread
		// blocks in the futex.
		runtime.Gosched()
	}
}

// concurrentHold is how long a sign of concurrent submitters (two
// batches in flight, or a submission that came while the sleeper ran a
// batch itself) keeps the sleeper starting a worker per batch. Short: a
// concurrent workload renews it with every batch, and the standby makes
// a wrong guess cost a wake-up, not a wait; a long hold would keep a
// node that just served concurrent batches off the fast path for a lone
// one (the bench's single-op cells follow its throughput cells on the
// same nodes).
const concurrentHold = 10 * time.Millisecond

// alone reports whether the sleeper may run a batch it just claimed
// itself: no other batch runs and no sign of concurrent submitters came
// within concurrentHold. While it runs one, what the host submits goes
// through the standby (a sign too); a goroutine per batch saves those
// wake-ups while batches keep coming concurrently.
func (s *ringServer) alone() bool {
	if time.Now().UnixNano() < s.concurrentUntil.Load() {
		return false
	}
	s.mu.Lock()
	n := len(s.running)
	s.mu.Unlock()
	if n > 1 {
		s.sawConcurrency()
		return false
	}
	return true
}

// sleepWait is how the sleeper sleeps: handing its processor off while
// batches come concurrently (the workers have work for it, and the
// runtime's monitor taking it back would return to polling every 20 µs),
// keeping it otherwise, so a lone batch's wake-up resumes at once
// (ring.Wait).
func (s *ringServer) sleepWait() ring.Wait {
	if time.Now().UnixNano() < s.concurrentUntil.Load() {
		return ring.Handoff
	}
	return ring.Brief
}

func (s *ringServer) sawConcurrency() {
	s.concurrentUntil.Store(time.Now().Add(concurrentHold).UnixNano())
}

// standby serves the SQ while the sleeper runs a batch itself: a host
// that submits then (a batch from another of its threads, or a
// cancellation of the batch running) bumps SQKick and wakes it. It
// claims what is there, applying cancellations and starting a worker per
// batch, and sleeps on SQKick's futex again. It is a second thread
// asleep in the kernel, woken only when batches come concurrently.
func (s *ringServer) standby() {
	defer s.wg.Done()
	var buf [8]job
	for !s.stopping.Load() {
		seen := s.r.Load(ring.SQKick)
		jobs := s.claim(buf[:0])
		if len(jobs) > 0 {
			s.sawConcurrency()
			s.byStandby.Add(int64(len(jobs)))
		}
		for _, j := range jobs {
			s.wg.Add(1)
			go s.work(j)
		}
		if len(jobs) == 0 && !s.stopping.Load() {
			// Woken only for concurrent batches, with work to find a
			// processor for: it hands its own off (ring.Wait).
			s.r.Await(ring.SQKick, seen, 0, ring.Handoff)
		}
	}
}

// work runs j on a goroutine of its own, then serves what comes next.
func (s *ringServer) work(j job) {
	defer s.wg.Done()
	s.serve(j, false)
}

// serve runs j, then keeps claiming and running batches for as long as
// the host submits them within the spin budget of each completion. On
// the sleeper (inline) a submission published while a batch ran is a
// sign of concurrent submitters (run looks).
func (s *ringServer) serve(j job, inline bool) {
	var buf [4]job
	for {
		j.inline, j.tail = inline, s.r.Load(ring.SQTail)
		s.run(j)
		if !inline { // the sleeper's run raised it (publish)
			s.r.Add(ring.SQSpin, 1)
		}
		inline = false
		if s.stopping.Load() {
			s.r.Add(ring.SQSpin, -1)
			return
		}
		jobs := buf[:0]
		sp := spin.New(s.gap.Budget(), s.gap)
		sp.YieldEvery(workerYield)
		for sp.Spin() && !s.stopping.Load() {
			if s.r.Load(ring.SQTail) != s.seen.Load() {
				if jobs = s.claim(jobs); len(jobs) > 0 {
					break
				}
			}
		}
		sp.Done()
		s.r.Add(ring.SQSpin, -1)
		// What the host published while this worker still counted as
		// spinning, it did not wake the sleeper for.
		jobs = s.claim(jobs)
		if len(jobs) == 0 {
			s.spinMisses.Add(1)
			return
		}
		s.bySpinner.Add(int64(len(jobs)))
		if len(jobs) > 1 {
			s.sawConcurrency()
		}
		for _, extra := range jobs[1:] {
			s.wg.Add(1)
			go s.work(extra)
		}
		j = jobs[0]
	}
}

// run runs one batch and publishes its completion.
func (s *ringServer) run(j job) {
	e := j.sub
	if j.bad != nil {
		s.log.Warn("refusing a malformed ring submission", zap.Error(j.bad))
		s.publish(j, ring.Comp{ID: e.ID, Flags: ring.FlagBatchError, BatchKinds: s.kinds.Mask(j.bad), BatchMsg: ring.NoMsg})
		return
	}
	area, err := ring.AreaAt(s.r.Arena(), e.Area, int(e.NOps))
	if err != nil { // CheckSub said it fits
		s.publish(j, ring.Comp{ID: e.ID, Flags: ring.FlagBatchError, BatchKinds: s.kinds.Mask(err), BatchMsg: ring.NoMsg})
		return
	}
	n := area.Len()
	ops := make([]Op, n)
	for i := range ops {
		ops[i] = opFromWire(area.Op(i))
	}
	results := make([]OpResult, n)
	start := time.Now()
	berr := s.impl.Transfer(j.ctx, PeerID(e.Peer), ops, results)
	s.transferTime.Observe(time.Since(start))
	if j.inline && s.r.Load(ring.SQTail) != j.tail {
		// Published while the sleeper ran this batch, before the host
		// could see its completion: another host thread submits.
		s.sawConcurrency()
	}
	s.publish(j, ring.EncodeResults(area, e.ID, s.kinds, n, func(i int) error { return results[i].Err }, berr))
}

// publish posts j's completion. j stops counting as running first: the
// host may submit its next batch the moment it sees the completion, and
// a claim that still found j there would take a lone batch for a
// concurrent one (alone), sending the sleeper to workers and the
// doorbell for concurrentHold, which on a loaded machine (a preempted
// worker between its completion and its cleanup) kept renewing itself.
// The sleeper, running j itself, then raises SQSpin and drops SQBusy:
// the host, woken by the completion, finds the SQ watched without
// waking the standby for its next batch.
func (s *ringServer) publish(j job, c ring.Comp) {
	j.cancel()
	if j.bad == nil {
		s.mu.Lock()
		delete(s.running, j.sub.ID)
		s.mu.Unlock()
	}
	if j.inline {
		s.r.Add(ring.SQSpin, 1)
		s.r.Store(ring.SQBusy, 0)
	}
	s.post(c)
}

// post publishes a completion, waiting while the CQ is full (the host
// bounds its batches in flight by the CQ's size, so only a host that
// stopped reading fills it).
func (s *ringServer) post(c ring.Comp) {
	s.postMu.Lock()
	for {
		used := s.cqTail - s.r.Load(ring.CQHead)
		if used < s.l.CQEntries {
			break
		}
		if used > s.l.CQEntries {
			s.postMu.Unlock()
			s.fail(fmt.Errorf("plugin ring: the host consumed completions that were never published (CQ head %d, tail %d): %w", s.r.Load(ring.CQHead), s.cqTail, errdefs.ErrProtocol))
			return
		}
		if s.stopping.Load() {
			s.postMu.Unlock()
			return
		}
		s.postMu.Unlock()
		time.Sleep(50 * time.Microsecond) // the host is behind: rare
		s.postMu.Lock()
	}
	c.Posted = time.Now().UnixNano()
	ring.PutComp(s.r.Comp(s.cqTail), c)
	s.cqTail++
	s.r.Store(ring.CQTail, s.cqTail)
	s.postMu.Unlock()
	hostAwake := s.r.Load(ring.CQIdle) == 0
	s.r.NotifyCQ()
	// The host's think time is learned from completions it was awake
	// for: the others' gaps hold its wake-up, which no spin catches.
	if hostAwake {
		s.lastPost.Store(c.Posted)
	} else {
		s.lastPost.Store(0)
	}
}

// fail stops serving the ring after the host broke its protocol; the
// host falls back to Transfer.
func (s *ringServer) fail(err error) {
	s.log.Error("the host broke the ring protocol; serving batches over gRPC only", zap.Error(err))
	s.stopping.Store(true)
	s.cancel()
}

// stop ends the ring: batches running get their contexts canceled and
// publish what they did, the goroutines end, and the ring is unmapped.
// It is idempotent. If a batch outlives ringStopWait (a Transfer that
// ignores its context) the ring stays mapped, since it may still write.
func (s *ringServer) stop() {
	s.stopOnce.Do(func() {
		s.stopping.Store(true)
		s.cancel()
		done := make(chan struct{})
		go func() { s.wg.Wait(); close(done) }()
		deadline := time.NewTimer(ringStopWait)
		defer deadline.Stop()
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			// Repeat the wakes: one that comes just before a futex call
			// is lost.
			s.r.Wake(ring.SQTail)
			s.r.Wake(ring.SQKick)
			if s.bell != nil {
				s.bell.Interrupt()
			}
			select {
			case <-done:
				s.log.Debug("ring stopped", zap.Int64("claimed_by_sleeper", s.bySleeper.Load()), zap.Int64("claimed_by_spinner", s.bySpinner.Load()), zap.Int64("run_by_sleeper", s.inline.Load()), zap.Int64("claimed_by_standby", s.byStandby.Load()), zap.Int64("sleeps_on_doorbell", s.bySleeperBell.Load()),
					zap.Int64("spins_missed", s.spinMisses.Load()), zap.Duration("mean_host_gap", s.gap.Mean()), zap.Duration("mean_transfer", s.transferTime.Mean()), zap.Any("spin", s.gap.Stats()))
				s.r.Store(ring.PluginState, ring.PluginStopped)
				s.seg.Close()
				if s.bell != nil {
					s.bell.Close()
				}
				return
			case <-deadline.C:
				s.log.Error("ring batches still running after the ring stopped; leaving it mapped", zap.Duration("waited", ringStopWait))
				return
			case <-tick.C:
			}
		}
	})
}

// openRing maps the ring file the host sent and starts serving it.
func (s *grpcServer) openRing(token, bellToken uint64, l ring.Layout, kinds []string) error {
	if s.fds == nil || !ring.Supported {
		return fmt.Errorf("open ring: %w", ErrNotSupported)
	}
	// The doorbell is optional: without one the sleeper sleeps on the
	// SQ's futex only, which the host, seeing SQBell never raised, wakes.
	var bell *ring.Doorbell
	defer func() {
		if bell != nil {
			bell.Close()
		}
	}()
	takeBell := func() {
		if bellToken == 0 {
			return
		}
		f, err := s.fds.Take(bellToken, fdTimeout)
		if err == nil {
			bell, err = ring.OpenDoorbell(f)
		}
		if err != nil {
			s.log.Warn("cannot take the ring's doorbell; its sleeper sleeps on the futex only", zap.Error(err))
		}
	}
	if err := l.Validate(); err != nil {
		return fmt.Errorf("open ring: %w", err)
	}
	s.mu.Lock()
	open := s.ring != nil
	s.mu.Unlock()
	if open {
		return fmt.Errorf("open ring: a ring is already open: %w", ErrInvalidArgument)
	}
	f, err := s.fds.Take(token, fdTimeout)
	if err != nil {
		return fmt.Errorf("open ring: %w", err)
	}
	takeBell()
	seg, err := shm.MapView(f, l.Size())
	if err != nil {
		f.Close()
		return fmt.Errorf("open ring: %v: %w", err, ErrInvalidArgument)
	}
	r, err := ring.Attach(seg.Bytes(), l)
	if err == nil {
		err = r.CheckHeader()
	}
	if err != nil {
		seg.Close()
		return fmt.Errorf("open ring: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		seg.Close()
		return fmt.Errorf("open ring: %w", ErrClosed)
	case s.ring != nil:
		seg.Close()
		return fmt.Errorf("open ring: a ring is already open: %w", ErrInvalidArgument)
	}
	s.ring = newRingServer(s.impl, s.log, seg, r, kinds, bell)
	bell = nil // the ring's now
	return nil
}

// stopRing stops the ring, if one is open.
func (s *grpcServer) stopRing() {
	s.mu.Lock()
	rs := s.ring
	s.closed = true
	s.mu.Unlock()
	if rs != nil {
		rs.stop()
	}
}
