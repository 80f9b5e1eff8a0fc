package plugins

import (
	"context"
	"fmt"
	"math"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	"golang.org/x/sys/unix"

	"github.com/kvconnect/kvconnect/errdefs"
	"github.com/kvconnect/kvconnect/internal/ring"
	"github.com/kvconnect/kvconnect/internal/shm"
	"github.com/kvconnect/kvconnect/internal/testbin"
)

// TestSleeperHandsOffWhileConcurrent: the SQ sleeper keeps its processor
// while batches come one at a time (a lone op's wake-up resumes at
// once) and hands it off while they come concurrently, until the sign
// of concurrency lapses.
func TestSleeperHandsOffWhileConcurrent(t *testing.T) {
	var s ringServer
	if got := s.sleepWait(); got != ring.Brief {
		t.Fatalf("a fresh ring's sleeper sleeps %s, want %s", got, ring.Brief)
	}
	s.sawConcurrency()
	if got := s.sleepWait(); got != ring.Handoff {
		t.Fatalf("after concurrent batches the sleeper sleeps %s, want %s", got, ring.Handoff)
	}
	s.concurrentUntil.Store(time.Now().Add(-time.Millisecond).UnixNano())
	if got := s.sleepWait(); got != ring.Brief {
		t.Fatalf("once concurrency lapsed the sleeper sleeps %s, want %s", got, ring.Brief)
	}
}

// testRing maps a ring of layout l in a new segment: the host's view,
// its header written, and the view a ring server serves (which closes
// the segment when it stops).
func testRing(t *testing.T, l ring.Layout) (seg *shm.Segment, host, served *ring.Shared) {
	t.Helper()
	seg, err := shm.NewLazy("ringtest", l.Size())
	if err != nil {
		t.Fatal(err)
	}
	if host, err = ring.Attach(seg.Bytes(), l); err != nil {
		t.Fatal(err)
	}
	host.WriteHeader()
	if served, err = ring.Attach(seg.Bytes(), l); err != nil {
		t.Fatal(err)
	}
	return seg, host, served
}

// instantTransport completes every batch at once; the ring server calls
// nothing else.
type instantTransport struct{ Transport }

func (instantTransport) Transfer(_ context.Context, _ PeerID, _ []Op, res []OpResult) error {
	FillResults(res, nil)
	return nil
}

// TestSleeperWaitsOnTheDoorbellWhileConcurrent: with a doorbell, the SQ
// sleeper waits on it while batches come concurrently (SQBell raised),
// and the host's NotifySQ for the next submission rings it: the batch is
// claimed and completed. Without a doorbell (a host without
// FeatureDoorbell) the sleeper sleeps on the SQ's futex (SQIdle), which
// NotifySQ wakes.
func TestSleeperWaitsOnTheDoorbellWhileConcurrent(t *testing.T) {
	if !ring.Supported {
		t.Skip("no rings on this platform (futexes are Linux's)")
	}
	for _, withBell := range []bool{true, false} {
		t.Run(fmt.Sprintf("doorbell=%v", withBell), func(t *testing.T) {
			l := ring.Layout{SQEntries: 32, CQEntries: 16, SlotSize: 4096, ArenaSlots: 4}
			seg, host, served := testRing(t, l)
			var bell *ring.Doorbell
			if withBell {
				hostBell, err := ring.NewDoorbell()
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(hostBell.Close)
				host.SetDoorbell(hostBell)
				rc, err := hostBell.File().SyscallConn()
				if err != nil {
					t.Fatal(err)
				}
				dup := -1
				rc.Control(func(fd uintptr) { dup, err = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0) })
				if err != nil {
					t.Fatal(err)
				}
				if bell, err = ring.OpenDoorbell(os.NewFile(uintptr(dup), "sent")); err != nil {
					t.Fatal(err)
				}
			}
			s := newRingServer(instantTransport{}, zaptest.NewLogger(t), seg, served, errdefs.KindNames(), bell)
			t.Cleanup(s.stop)
			s.concurrentUntil.Store(math.MaxInt64) // batches come concurrently, as far as the sleeper knows

			submit := func(id uint64) {
				tail := host.Load(ring.SQTail)
				ring.PutSub(host.Sub(tail), ring.Sub{Op: ring.OpBatch, NOps: 1, ID: id, Peer: 1, Area: 0})
				host.Store(ring.SQTail, tail+1)
				host.NotifySQ()
				testbin.Eventually(t, fmt.Sprintf("batch %d's completion", id), func() bool { return host.Load(ring.CQTail) == uint32(id) })
				if c := ring.GetComp(host.Comp(uint32(id - 1))); c.ID != id || c.Flags&ring.FlagBatchError != 0 {
					t.Fatalf("completion %+v, want batch %d done", c, id)
				}
				host.Store(ring.CQHead, uint32(id))
			}
			submit(1)
			// The sleeper sleeps again, the way concurrent batches have it
			// sleep, and no worker spins: only a wake-up can bring it the
			// next batch.
			idle := ring.SQIdle
			if withBell {
				idle = ring.SQBell
			}
			testbin.Eventually(t, "the sleeper to sleep with no worker spinning", func() bool {
				return served.Load(idle) == 1 && served.Load(ring.SQSpin) == 0
			})
			submit(2)
		})
	}
}

// countingTransport completes every batch at once and counts them.
type countingTransport struct {
	Transport
	n atomic.Int64
}

func (c *countingTransport) Transfer(_ context.Context, _ PeerID, _ []Op, res []OpResult) error {
	FillResults(res, nil)
	c.n.Add(1)
	return nil
}

// TestBatchStopsRunningBeforeItsCompletion: a batch no longer counts as
// running once its completion can be seen. The host may submit its next
// batch the moment it sees one; a claim that still counted the last
// would take a lone batch for a concurrent one (alone). A full CQ holds
// the batch's completion back, so the order is observable: with the CQ
// full the batch has already left running.
func TestBatchStopsRunningBeforeItsCompletion(t *testing.T) {
	if !ring.Supported {
		t.Skip("no rings on this platform (futexes are Linux's)")
	}
	l := ring.Layout{SQEntries: 32, CQEntries: 4, SlotSize: 4096, ArenaSlots: 4}
	seg, host, served := testRing(t, l)
	tr := &countingTransport{}
	s := newRingServer(tr, zaptest.NewLogger(t), seg, served, errdefs.KindNames(), nil)
	t.Cleanup(s.stop)
	submit := func(id uint64) {
		tail := host.Load(ring.SQTail)
		ring.PutSub(host.Sub(tail), ring.Sub{Op: ring.OpBatch, NOps: 1, ID: id, Peer: 1, Area: 0})
		host.Store(ring.SQTail, tail+1)
		host.NotifySQ()
	}
	running := func() int {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.running)
	}
	// Fill the CQ: completions the host does not consume.
	for id := uint64(1); id <= uint64(l.CQEntries); id++ {
		submit(id)
	}
	testbin.Eventually(t, "a full CQ", func() bool { return host.Load(ring.CQTail) == l.CQEntries })
	last := uint64(l.CQEntries) + 1
	submit(last)
	testbin.Eventually(t, "the last batch to run", func() bool { return tr.n.Load() == int64(last) })
	testbin.Eventually(t, "the last batch, done but unpublished, to leave running", func() bool { return running() == 0 })
	if got := host.Load(ring.CQTail); got != l.CQEntries {
		t.Fatalf("CQ tail %d with the CQ full (head 0, %d entries)", got, l.CQEntries)
	}
	host.Store(ring.CQHead, l.CQEntries) // the host reads them: room for the last
	testbin.Eventually(t, "the last batch's completion", func() bool { return host.Load(ring.CQTail) == l.CQEntries+1 })
	if c := ring.GetComp(host.Comp(l.CQEntries)); c.ID != last || c.Flags&ring.FlagBatchError != 0 {
		t.Fatalf("completion %+v, want batch %d done", c, last)
	}
}

// TestWorkerSpinYieldsByTime: after each batch the worker spins for the
// host's next one, and yields its processor at most once per
// workerYield of that spin (each runtime.Gosched may wake a second
// thread onto the vCPU the host needs), not every 2048 checks. Here the
// host submits nothing more, so every spin runs to its budget. (Under
// the race detector 128 checks outlast the spinner's preemption test,
// so each spin ends at its first look at the clock and the bound holds
// trivially; internal/spin's TestYieldEverySpacesYieldsByTime holds the
// rule there.)
func TestWorkerSpinYieldsByTime(t *testing.T) {
	if !ring.Supported {
		t.Skip("no rings on this platform (futexes are Linux's)")
	}
	t.Setenv(ring.EnvPluginSpin, "") // the learned budget, up to maxWorkerSpin
	l := ring.Layout{SQEntries: 32, CQEntries: 16, SlotSize: 4096, ArenaSlots: 4}
	seg, host, served := testRing(t, l)
	s := newRingServer(instantTransport{}, zaptest.NewLogger(t), seg, served, errdefs.KindNames(), nil)
	t.Cleanup(s.stop)
	const n = 20
	for id := uint64(1); id <= n; id++ {
		tail := host.Load(ring.SQTail)
		ring.PutSub(host.Sub(tail), ring.Sub{Op: ring.OpBatch, NOps: 1, ID: id, Peer: 1, Area: 0})
		host.Store(ring.SQTail, tail+1)
		host.NotifySQ()
		testbin.Eventually(t, fmt.Sprintf("batch %d's completion", id), func() bool { return host.Load(ring.CQTail) == uint32(id) })
		host.Store(ring.CQHead, uint32(id))
		testbin.Eventually(t, fmt.Sprintf("the spin after batch %d to end", id), func() bool { return s.spinMisses.Load() == int64(id) })
	}
	st := s.gap.Stats()
	if limit := int64(n) * int64(maxWorkerSpin/workerYield); st.Yields > limit {
		t.Fatalf("the worker yielded %d times over %d spins of up to %v, want at most %d (one per %v)", st.Yields, n, maxWorkerSpin, limit, workerYield)
	}
	t.Logf("%d yields over %d spins (%+v)", st.Yields, n, st)
}

// TestClaimsCountBatchesTakenAtTheLastLook: a batch the host publishes
// between the sleeper's claim of a lone batch and its last look at the
// SQ is claimed at that look and counted with the sleeper's claims, so
// the claims (RingStats) add up to the batches the host sent.
func TestClaimsCountBatchesTakenAtTheLastLook(t *testing.T) {
	if !ring.Supported {
		t.Skip("no rings on this platform (futexes are Linux's)")
	}
	l := ring.Layout{SQEntries: 32, CQEntries: 16, SlotSize: 4096, ArenaSlots: 4}
	seg, host, served := testRing(t, l)
	var sent atomic.Uint64
	publish := func() {
		id := sent.Add(1)
		tail := host.Load(ring.SQTail)
		ring.PutSub(host.Sub(tail), ring.Sub{Op: ring.OpBatch, NOps: 1, ID: id, Peer: 1, Area: 0})
		host.Store(ring.SQTail, tail+1)
	}
	var second atomic.Bool
	testBeforeLastLook = func() {
		if second.CompareAndSwap(false, true) {
			publish()
		}
	}
	t.Cleanup(func() { testBeforeLastLook = nil })
	tr := &countingTransport{}
	s := newRingServer(tr, zaptest.NewLogger(t), seg, served, errdefs.KindNames(), nil)
	t.Cleanup(s.stop)
	// A lone batch to a sleeping sleeper, until one reaches its last look
	// (the standby, starting, may take the first).
	for round := 0; !second.Load(); round++ {
		if round == 10 {
			t.Fatalf("the sleeper ran no lone batch in 10 tries (sleeper %d, standby %d, spinner %d claims)", s.bySleeper.Load(), s.byStandby.Load(), s.bySpinner.Load())
		}
		// ... and past the hold a batch the standby or a worker ran puts on
		// the sleeper's own runs (concurrentHold): a fast machine otherwise
		// runs every round within it, and the sleeper never runs one.
		testbin.Eventually(t, "the sleeper to sleep with no worker spinning, past the concurrency hold", func() bool {
			return served.Load(ring.SQIdle) == 1 && served.Load(ring.SQSpin) == 0 && time.Now().UnixNano() >= s.concurrentUntil.Load()
		})
		publish()
		host.NotifySQ()
		testbin.Eventually(t, "the batches' completions", func() bool { return uint64(host.Load(ring.CQTail)) == sent.Load() })
		host.Store(ring.CQHead, host.Load(ring.CQTail))
	}
	n := sent.Load()
	if got := uint64(s.bySleeper.Load() + s.bySpinner.Load() + s.byStandby.Load()); got != n || uint64(tr.n.Load()) != n {
		t.Fatalf("claims: sleeper %d, spinner %d, standby %d for %d batches (%d run)", s.bySleeper.Load(), s.bySpinner.Load(), s.byStandby.Load(), n, tr.n.Load())
	}
}
