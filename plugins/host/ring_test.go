//go:build linux

package host

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	"github.com/kvconnect/kvconnect/errdefs"
	"github.com/kvconnect/kvconnect/internal/pluginrpc"
	"github.com/kvconnect/kvconnect/internal/pluginrpc/proto"
	"github.com/kvconnect/kvconnect/internal/ring"
	"github.com/kvconnect/kvconnect/internal/shm"
	"github.com/kvconnect/kvconnect/internal/spin"
	"github.com/kvconnect/kvconnect/internal/testbin"
	"github.com/kvconnect/kvconnect/plugins"
)

// blockingTransport is a memTransport whose Transfer to peer 7 waits
// for release (or its context), reporting its context's end on ended;
// every other peer's batch fails op i with ErrOutOfBounds when i is odd.
type blockingTransport struct {
	memTransport
	running atomic.Int32
	release chan struct{}
	ended   chan error
	closing chan struct{}
	once    sync.Once
}

func newBlocking() *blockingTransport {
	return &blockingTransport{release: make(chan struct{}), ended: make(chan error, 4096), closing: make(chan struct{})}
}

// Close fails the batches in flight with ErrClosed, as the contract says.
func (b *blockingTransport) Close(ctx context.Context) error {
	b.once.Do(func() { close(b.closing) })
	return b.memTransport.Close(ctx)
}

func (b *blockingTransport) Transfer(ctx context.Context, peer plugins.PeerID, ops []plugins.Op, res []plugins.OpResult) error {
	if peer != 7 {
		for i := range res {
			res[i].Err = nil
			if i%2 == 1 {
				res[i].Err = fmt.Errorf("blocking: op %d: %w", i, errdefs.ErrOutOfBounds)
			}
		}
		return nil
	}
	b.running.Add(1)
	defer b.running.Add(-1)
	select {
	case <-b.release:
		plugins.FillResults(res, nil)
		return nil
	case <-b.closing:
		err := fmt.Errorf("blocking: %w", errdefs.ErrClosed)
		plugins.FillResults(res, err)
		return err
	case <-ctx.Done():
		b.ended <- ctx.Err()
		err := fmt.Errorf("blocking: %w", plugins.ContextError(ctx.Err()))
		plugins.FillResults(res, err)
		return err
	}
}

// inMemoryRing serves t in memory and checks that a ring was set up.
func inMemoryRing(t *testing.T, tr plugins.Transport) *inMemory {
	t.Helper()
	m := inMemoryInit(t, tr)
	if ring.Supported && m.ring.Load() == nil {
		t.Fatal("no ring after Init")
	}
	return m
}

// inMemoryInit serves t in memory, initialized, closed at the test's end.
func inMemoryInit(t *testing.T, tr plugins.Transport) *inMemory {
	t.Helper()
	p, err := InMemory(tr, "ringtest", zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close(context.Background()) })
	m := p.(*inMemory)
	if _, err := m.Init(context.Background(), plugins.InitRequest{}); err != nil {
		t.Fatal(err)
	}
	return m
}

func ops(n int) []plugins.Op {
	out := make([]plugins.Op, n)
	for i := range out {
		out[i] = plugins.Op{Kind: plugins.OpWrite, LocalRegion: 1, RemoteRegion: 2, LocalOffset: uint64(i), Length: 1}
	}
	return out
}

// TestRingCarriesBatches: batches go through the ring, with per-op
// failures keeping their sentinels and messages; many goroutines at once.
func TestRingCarriesBatches(t *testing.T) {
	m := inMemoryRing(t, newBlocking())
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 1; k < 200; k += 7 {
				res := make([]plugins.OpResult, k)
				if err := m.Transfer(context.Background(), 1, ops(k), res); err != nil {
					t.Error(err)
					return
				}
				for i, r := range res {
					if (i%2 == 1) != (r.Err != nil) || (r.Err != nil && (!errors.Is(r.Err, errdefs.ErrOutOfBounds) || r.Err.Error() != fmt.Sprintf("blocking: op %d: out of bounds of registered region", i))) {
						t.Errorf("op %d of %d: %v", i, k, r.Err)
					}
				}
			}
		}()
	}
	wg.Wait()
	// An empty batch is answered (over gRPC).
	if err := m.Transfer(context.Background(), 1, nil, nil); err != nil {
		t.Fatalf("an empty batch: %v", err)
	}
	// The largest batch goes through the ring too.
	res := make([]plugins.OpResult, plugins.MaxBatchOps)
	if err := m.Transfer(context.Background(), 1, ops(plugins.MaxBatchOps), res); err != nil || !errors.Is(res[1].Err, errdefs.ErrOutOfBounds) {
		t.Fatalf("a batch of %d ops: %v / %v", plugins.MaxBatchOps, err, res[1].Err)
	}
	if m.ring.Load() == nil || !m.ring.Load().usable() {
		t.Fatal("the ring stopped")
	}
	if ring.Supported && m.ring.Load().bell == nil {
		t.Fatal("the ring has no doorbell, though the plugin's SDK takes one")
	}
}

// pollMarkTransport records whether each batch's context said its
// completion is polled.
type pollMarkTransport struct {
	memTransport
	polled chan bool
}

func (p *pollMarkTransport) Transfer(ctx context.Context, _ plugins.PeerID, _ []plugins.Op, res []plugins.OpResult) error {
	p.polled <- plugins.CompletionPolled(ctx)
	plugins.FillResults(res, nil)
	return nil
}

// TestRingBatchesSayTheyArePolled: a batch that came through a ring
// tells the transport that the host polls for its completion (so the
// transport need not spin too); one that came as a Transfer call does
// not.
func TestRingBatchesSayTheyArePolled(t *testing.T) {
	if !ring.Supported {
		t.Skip("no rings on this platform (futexes are Linux's)")
	}
	for _, rings := range []string{"", "0"} {
		t.Setenv(pluginrpc.EnvRings, rings)
		tr := &pollMarkTransport{polled: make(chan bool, 1)}
		p, err := InMemory(tr, "ringtest", zaptest.NewLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		m := p.(*inMemory)
		if _, err := m.Init(context.Background(), plugins.InitRequest{}); err != nil {
			t.Fatal(err)
		}
		if err := m.Transfer(context.Background(), 1, ops(1), make([]plugins.OpResult, 1)); err != nil {
			t.Fatal(err)
		}
		if got, want := <-tr.polled, rings == ""; got != want {
			t.Errorf("rings %q (ring in use: %v): the batch's context says polled %v, want %v", rings, m.ring.Load() != nil, got, want)
		}
		p.Close(context.Background())
	}
}

// TestRingPollerOnALockedThreadDoesNotYield: the host's poller yields
// its processor before it sleeps, but not for a caller whose goroutine is
// locked to its thread (a call from C: spin.WithoutYield), where a yield
// costs two thread hand-offs.
func TestRingPollerOnALockedThreadDoesNotYield(t *testing.T) {
	tr := newBlocking()
	m := inMemoryRing(t, tr)
	rc := m.ring.Load()
	if rc == nil {
		t.Skip("no rings on this platform (futexes are Linux's)")
	}
	var yields atomic.Int32
	rc.yield = func() { yields.Add(1); runtime.Gosched() } // before any batch: no race
	for _, locked := range []bool{false, true} {
		ctx := context.Background()
		if locked {
			ctx = spin.WithoutYield(ctx)
		}
		yields.Store(0)
		slept := rc.stats.slept.Load()
		done := make(chan error, 1)
		go func() { done <- m.Transfer(ctx, 7, ops(1), make([]plugins.OpResult, 1)) }()
		for rc.stats.slept.Load() == slept { // the poller went to sleep at least once
			time.Sleep(time.Millisecond)
		}
		tr.release <- struct{}{}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if n := yields.Load(); locked && n != 0 || !locked && n == 0 {
			t.Errorf("locked %v: the poller yielded %d times before sleeping", locked, n)
		}
	}
}

// TestRingPollerMeasuresItsWaits: the host's poller decides whether to
// spin from the round trips it saw (spin.Chooser): every batch's wait
// reaches its Chooser, which has a median after an epoch's worth.
func TestRingPollerMeasuresItsWaits(t *testing.T) {
	m := inMemoryRing(t, newBlocking())
	rc := m.ring.Load()
	if rc == nil {
		t.Skip("no rings on this platform (futexes are Linux's)")
	}
	if rc.rtt.Choose == nil {
		t.Fatal("the poller's spin budget has no Chooser")
	}
	for range 2 * 64 {
		if err := m.Transfer(context.Background(), 1, ops(1), make([]plugins.OpResult, 1)); err != nil {
			t.Fatal(err)
		}
	}
	if ch := rc.rtt.Choose.Choice(); ch.Median <= 0 {
		t.Fatalf("after 128 batches the Chooser has seen no wait: %+v", ch)
	}
}

// TestRingsTurnedOff: with KVCONNECT_PLUGIN_RINGS=0 every batch is a
// Transfer call, and works.
func TestRingsTurnedOff(t *testing.T) {
	t.Setenv(pluginrpc.EnvRings, "0")
	p, err := InMemory(newBlocking(), "ringtest", zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	m := p.(*inMemory)
	m.Init(context.Background(), plugins.InitRequest{})
	if m.ring.Load() != nil {
		t.Fatal("a ring although rings are off")
	}
	res := make([]plugins.OpResult, 3)
	if err := m.Transfer(context.Background(), 1, ops(3), res); err != nil || res[0].Err != nil || !errors.Is(res[1].Err, errdefs.ErrOutOfBounds) {
		t.Fatalf("over gRPC: %v %v", err, res)
	}
}

// TestRingCancellationReachesPlugin: the caller's context ending ends
// the plugin's Transfer too: a cancel as ErrCanceled, a deadline as
// ErrTimeout, and the host returns as soon as the plugin reported it
// (TestTransferWaitsForTheGivenUpBatch).
func TestRingCancellationReachesPlugin(t *testing.T) {
	bt := newBlocking()
	m := inMemoryRing(t, bt)
	for _, tc := range []struct {
		name   string
		ctx    func() (context.Context, context.CancelFunc)
		want   error
		plugin error
	}{
		{"cancel", func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) }, errdefs.ErrCanceled, context.Canceled},
		{"deadline", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 200*time.Millisecond)
		}, errdefs.ErrTimeout, nil},
	} {
		ctx, cancel := tc.ctx()
		res := make([]plugins.OpResult, 2)
		done := make(chan error, 1)
		go func() { done <- m.Transfer(ctx, 7, ops(2), res) }()
		for bt.running.Load() == 0 {
			runtime.Gosched()
		}
		if tc.name == "cancel" {
			cancel()
		}
		var err error
		select {
		case err = <-done:
		case <-time.After(testbin.WaitLimit):
			t.Fatalf("%s: Transfer still running", tc.name)
		}
		cancel()
		if !errors.Is(err, tc.want) || !errors.Is(res[0].Err, tc.want) {
			t.Errorf("%s: %v / %v, want %v", tc.name, err, res[0].Err, tc.want)
		}
		select {
		case got := <-bt.ended:
			if tc.plugin != nil && !errors.Is(got, tc.plugin) {
				t.Errorf("%s: the plugin's context ended with %v, want %v", tc.name, got, tc.plugin)
			}
		case <-time.After(testbin.WaitLimit):
			t.Fatalf("%s: the plugin's Transfer never saw its context end", tc.name)
		}
	}
	// The ring still works, and the canceled batches' areas came back.
	testbin.Eventually(t, "the zombies to be reaped", func() bool {
		rc := m.ring.Load()
		rc.mu.Lock()
		defer rc.mu.Unlock()
		return len(rc.pending) == 0 && !rc.reaping
	})
	res := make([]plugins.OpResult, 1)
	if err := m.Transfer(context.Background(), 1, ops(1), res); err != nil || res[0].Err != nil {
		t.Fatalf("after cancellations: %v %v", err, res[0].Err)
	}
}

// releasingTransport is a blockingTransport whose batches to peer 8
// release the batches blocked on peer 7.
type releasingTransport struct {
	*blockingTransport
	once sync.Once
}

func (r *releasingTransport) Transfer(ctx context.Context, peer plugins.PeerID, ops []plugins.Op, res []plugins.OpResult) error {
	if peer == 8 {
		r.once.Do(func() { close(r.release) })
		plugins.FillResults(res, nil)
		return nil
	}
	return r.blockingTransport.Transfer(ctx, peer, ops, res)
}

// TestRingBatchWhileSleeperBusy: the plugin's SQ sleeper runs a lone
// batch itself; a batch another host goroutine submits meanwhile still
// runs at once (the host wakes the plugin's standby), rather than wait
// for the first: here the first waits for the second, so without the
// standby neither ends.
func TestRingBatchWhileSleeperBusy(t *testing.T) {
	bt := &releasingTransport{blockingTransport: newBlocking()}
	m := inMemoryRing(t, bt)
	first := make(chan error, 1)
	go func() { first <- m.Transfer(context.Background(), 7, ops(1), make([]plugins.OpResult, 1)) }()
	for bt.running.Load() == 0 {
		runtime.Gosched()
	}
	second := make(chan error, 1)
	go func() { second <- m.Transfer(context.Background(), 8, ops(1), make([]plugins.OpResult, 1)) }()
	for _, w := range []struct {
		name string
		ch   chan error
	}{{"the second batch", second}, {"the first batch", first}} {
		select {
		case err := <-w.ch:
			if err != nil {
				t.Fatalf("%s: %v", w.name, err)
			}
		case <-time.After(testbin.WaitLimit):
			t.Fatalf("%s never completed: the plugin ran the batches one after the other", w.name)
		}
	}
}

// TestRingBackpressure: more batches than the ring holds in flight wait
// for room (none fails, none is lost), and all complete once the plugin
// catches up.
func TestRingBackpressure(t *testing.T) {
	small := ring.Layout{SQEntries: 16, CQEntries: 8, SlotSize: 4096, ArenaSlots: 64}
	defer func(old func() ring.Layout) { ringLayout = old }(ringLayout)
	ringLayout = func() ring.Layout { return small }
	bt := newBlocking()
	m := inMemoryRing(t, bt)
	const n = 40
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		go func() {
			res := make([]plugins.OpResult, 1)
			err := m.Transfer(context.Background(), 7, ops(1), res)
			if err == nil {
				err = res[0].Err
			}
			errs <- err
		}()
	}
	testbin.Eventually(t, "the ring to fill", func() bool { return bt.running.Load() == int32(small.CQEntries) })
	select {
	case err := <-errs:
		t.Fatalf("a batch ended while the ring was full: %v", err)
	default:
	}
	close(bt.release)
	for i := 0; i < n; i++ {
		select {
		case err := <-errs:
			if err != nil {
				t.Fatalf("batch: %v", err)
			}
		case <-time.After(testbin.WaitLimit):
			t.Fatalf("%d of %d batches never completed", n-i, n)
		}
	}
}

// TestRingCloseEndsWaiters: Close with batches in flight ends them with
// ErrClosed, and leaves no goroutine or mapping behind.
func TestRingCloseEndsWaiters(t *testing.T) {
	before, bells := runtime.NumGoroutine(), eventfds()
	bt := newBlocking()
	p, err := InMemory(bt, "ringtest", zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	p.Init(context.Background(), plugins.InitRequest{})
	done := make(chan error, 1)
	res := make([]plugins.OpResult, 1)
	go func() { done <- p.Transfer(context.Background(), 7, ops(1), res) }()
	testbin.Eventually(t, "the batch to run", func() bool { return bt.running.Load() == 1 })
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, errdefs.ErrClosed) && !errors.Is(res[0].Err, errdefs.ErrClosed) {
			t.Fatalf("a batch in flight at Close: %v / %v, want ErrClosed", err, res[0].Err)
		}
	case <-time.After(testbin.WaitLimit):
		t.Fatal("a batch in flight outlived Close")
	}
	if err := p.Transfer(context.Background(), 1, ops(1), res); !errors.Is(err, errdefs.ErrClosed) {
		t.Fatalf("Transfer after Close: %v", err)
	}
	if n := memfdsNamed("ring"); n != 0 {
		t.Fatalf("%d ring memfds open after Close", n)
	}
	if n := eventfds(); n != bells {
		t.Fatalf("%d eventfds open after Close, %d before: a doorbell was left open", n, bells)
	}
	testbin.Eventually(t, "goroutines to end", func() bool { return runtime.NumGoroutine() <= before })
}

// TestRingPluginCrashMidBatch: a plugin process that dies during a batch
// fails it with ErrTransportCrashed at once; so do batches waiting.
func TestRingPluginCrashMidBatch(t *testing.T) {
	isolate(t)
	p := launchFake(t)
	if _, err := p.Init(t.Context(), plugins.InitRequest{}); err != nil {
		t.Fatal(err)
	}
	if p.ring.Load() == nil {
		t.Fatal("no ring with the plugin")
	}
	waiting := make(chan error, 1)
	go func() { waiting <- p.Transfer(context.Background(), 99, ops(1), make([]plugins.OpResult, 1)) }()
	start := time.Now()
	res := make([]plugins.OpResult, 3)
	err := p.Transfer(context.Background(), 98, ops(3), res)
	if !errors.Is(err, errdefs.ErrTransportCrashed) || !errors.Is(res[2].Err, errdefs.ErrTransportCrashed) {
		t.Fatalf("a batch whose plugin died: %v / %v, want ErrTransportCrashed", err, res[2].Err)
	}
	if !strings.Contains(err.Error(), "exited with status 3") {
		t.Errorf("%v does not say how the plugin ended", err)
	}
	select {
	case err := <-waiting:
		if !errors.Is(err, errdefs.ErrTransportCrashed) {
			t.Fatalf("the other batch: %v", err)
		}
	case <-time.After(testbin.WaitLimit):
		t.Fatal("the other batch outlived the plugin")
	}
	// At once: the batches are failed by the process's exit, not by a
	// timeout (there is none here), so the only bound is a hang's.
	t.Logf("failed %v after the batch started: %v", time.Since(start), err)
}

// TestRingIdleSleeps: after traffic, an idle host and plugin wait for
// each other without spinning or polling: the host has no poller and no
// reaper left, no plugin worker spins on the SQ, and the plugin's SQ
// sleeper is blocked in futex(FUTEX_WAIT) on the SQ tail with no timeout,
// so only the host's next submission wakes it (its standby likewise on
// SQ kick). The sleeper may instead wait on the doorbell (SQBell): it
// does when its last sleep began within concurrentHold of a sign of
// concurrent batches, which a loaded machine gives one-at-a-time traffic
// too (a batch claimed by the standby while the sleeper was preempted),
// and it stays there until the next batch: a read of the eventfd in the
// runtime's poller, with no deadline. A state, not a CPU share:
// what idling costs is BenchmarkRingIdle's report.
// The traffic before idling is one batch at a time, or ends with
// batches from several goroutines at once, after which the sleeper
// mostly waits on the doorbell.
func TestRingIdleSleeps(t *testing.T) {
	for _, concurrent := range []bool{false, true} {
		t.Run(fmt.Sprintf("concurrent=%v", concurrent), func(t *testing.T) { testRingIdleSleeps(t, concurrent) })
	}
}

func testRingIdleSleeps(t *testing.T, concurrent bool) {
	isolate(t)
	p := launchFake(t)
	if _, err := p.Init(t.Context(), plugins.InitRequest{}); err != nil {
		t.Fatal(err)
	}
	rc := p.ring.Load()
	if rc == nil {
		t.Fatal("no ring with the plugin")
	}
	for i := 0; i < 200; i++ {
		if err := p.Transfer(context.Background(), 1, ops(1), make([]plugins.OpResult, 1)); err != nil {
			t.Fatal(err)
		}
	}
	if concurrent {
		var wg sync.WaitGroup
		errs := make(chan error, 4)
		for range 4 {
			wg.Go(func() {
				for range 50 {
					if err := p.Transfer(context.Background(), 1, ops(1), make([]plugins.OpResult, 1)); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	}
	start := time.Now()
	testbin.Eventually(t, "the host's side of the ring to go idle (no poller, no reaper, nothing pending)", func() bool {
		rc.mu.Lock()
		defer rc.mu.Unlock()
		return !rc.polling && !rc.reaping && len(rc.pending) == 0
	})
	onBell := false
	testbin.Eventually(t, "the plugin's SQ sleeper to block on the SQ tail's futex with no timeout (or on the doorbell) and its standby on SQ kick's, no worker spinning", func() bool {
		if rc.r.Load(ring.SQSpin) != 0 || rc.r.Load(ring.SQBusy) != 0 ||
			!testbin.SleepsOnFutex(t, p.Pid(), "kvconnect:ring", uint64(ring.SQKick)) {
			return false
		}
		onBell = rc.r.Load(ring.SQBell) == 1
		return onBell || rc.r.Load(ring.SQIdle) == 1 && testbin.SleepsOnFutex(t, p.Pid(), "kvconnect:ring", uint64(ring.SQTail))
	})
	t.Logf("both sides asleep %v after the last batch (the plugin's sleeper on the doorbell: %v)", time.Since(start), onBell)
	// Still usable: the next submission wakes the sleeper.
	if err := p.Transfer(context.Background(), 1, ops(1), make([]plugins.OpResult, 1)); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkRingIdle reports the CPU an idle host and plugin use after
// traffic through the ring, as a share of a core, over b.N idle 10 ms
// periods (docs/DATAPATH.md):
//
//	go test -run '^$' -bench BenchmarkRingIdle -benchtime 1000x ./plugins/host
func BenchmarkRingIdle(b *testing.B) {
	p, err := Launch(context.Background(), LaunchConfig{Name: "fake", Path: testbin.MustBuild(b, "./plugins/host/testdata/fakeplugin", "fakeplugin"), Logger: zap.NewNop()})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close(context.Background())
	if _, err := p.Init(context.Background(), plugins.InitRequest{}); err != nil {
		b.Fatal(err)
	}
	for i := 0; i < 2000; i++ {
		if err := p.Transfer(context.Background(), 1, ops(1), make([]plugins.OpResult, 1)); err != nil {
			b.Fatal(err)
		}
	}
	time.Sleep(100 * time.Millisecond) // let the spinners time out
	host0, plugin0 := testbin.CPUTime(b, os.Getpid()), testbin.CPUTime(b, p.Pid())
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		time.Sleep(10 * time.Millisecond) // measuring idleness: nothing to wait for
	}
	b.StopTimer()
	wall := b.Elapsed()
	host, plugin := testbin.CPUTime(b, os.Getpid())-host0, testbin.CPUTime(b, p.Pid())-plugin0
	b.ReportMetric(100*host.Seconds()/wall.Seconds(), "host-%core")
	b.ReportMetric(100*plugin.Seconds()/wall.Seconds(), "plugin-%core")
}

// rawPlugin serves srv (a plugin of its own making: an old SDK's, or a
// hostile one) over the plugin protocol in memory, with a real fd
// channel whose receiving end it hands to withFDs first, and returns the
// host's client after Info and Init.
func rawPlugin(t *testing.T, srv proto.TransportServer, withFDs func(*pluginrpc.FDReceiver)) *grpcClient {
	t.Helper()
	hostEnd, childEnd, err := pluginrpc.FDChannelPair()
	if err != nil {
		t.Fatal(err)
	}
	fds, err := pluginrpc.NewFDReceiverFile(childEnd)
	childEnd.Close()
	if err != nil {
		t.Fatal(err)
	}
	if withFDs != nil {
		withFDs(fds)
	}
	lis := bufconn.Listen(1 << 20)
	gs := grpc.NewServer()
	proto.RegisterTransportServer(gs, srv)
	go gs.Serve(lis)
	cc, err := grpc.NewClient("passthrough:///raw", grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	c := &grpcClient{rpc: proto.NewTransportClient(cc), name: "raw", fds: pluginrpc.NewFDSender(hostEnd), log: zaptest.NewLogger(t)}
	t.Cleanup(func() {
		c.closeRing()
		cc.Close()
		gs.Stop()
		c.fds.Close()
		fds.Close()
	})
	if _, err := c.Info(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Init(context.Background(), plugins.InitRequest{}); err != nil {
		t.Fatal(err)
	}
	return c
}

// oldPlugin is a plugin of an SDK without rings (or of another language):
// it claims the feature but answers OpenRing Unimplemented, and serves
// Transfer.
type oldPlugin struct {
	proto.UnimplementedTransportServer
	transfers atomic.Int32
}

func (o *oldPlugin) Info(context.Context, *proto.InfoRequest) (*proto.InfoResponse, error) {
	return &proto.InfoResponse{Name: "old", ApiVersion: 1, Features: pluginrpc.FeatureRings}, nil
}
func (o *oldPlugin) Init(context.Context, *proto.InitRequest) (*proto.InitResponse, error) {
	return &proto.InitResponse{}, nil
}
func (o *oldPlugin) Transfer(_ context.Context, req *proto.TransferRequest) (*proto.TransferResponse, error) {
	o.transfers.Add(1)
	return &proto.TransferResponse{Errors: []*proto.OpError{{Index: 0, Kind: "timeout", Kinds: []string{"timeout"}, Message: "old: slow"}}}, nil
}

// TestRingOldPluginUsesTransfer: a plugin that does not serve OpenRing
// keeps working over Transfer.
func TestRingOldPluginUsesTransfer(t *testing.T) {
	old := &oldPlugin{}
	c := rawPlugin(t, old, nil)
	if c.ring.Load() != nil {
		t.Fatal("a ring with a plugin that has none")
	}
	res := make([]plugins.OpResult, 2)
	if err := c.Transfer(context.Background(), 1, ops(2), res); err != nil || !errors.Is(res[0].Err, errdefs.ErrTimeout) || res[1].Err != nil {
		t.Fatalf("over Transfer: %v %v", err, res)
	}
	if old.transfers.Load() != 1 {
		t.Fatal("Transfer was not called")
	}
}

// hostilePlugin serves a ring and answers every submission with what
// scribble writes into the ring; its Transfer (the fallback) succeeds.
type hostilePlugin struct {
	oldPlugin
	fds     *pluginrpc.FDReceiver
	scribe  func(r *ring.Shared, sub ring.Sub)
	started chan struct{}
	stop    chan struct{}
	wg      sync.WaitGroup
}

func (h *hostilePlugin) Transfer(context.Context, *proto.TransferRequest) (*proto.TransferResponse, error) {
	h.transfers.Add(1)
	return &proto.TransferResponse{}, nil
}

func (h *hostilePlugin) OpenRing(_ context.Context, req *proto.OpenRingRequest) (*proto.OpenRingResponse, error) {
	f, err := h.fds.Take(req.FdToken, time.Second)
	if err != nil {
		return nil, pluginrpc.ToStatus(err)
	}
	l := ring.Layout{SQEntries: req.SqEntries, CQEntries: req.CqEntries, SlotSize: req.SlotSize, ArenaSlots: req.ArenaSlots}
	seg, err := shm.MapView(f, l.Size())
	if err != nil {
		return nil, pluginrpc.ToStatus(err)
	}
	r, _ := ring.Attach(seg.Bytes(), l)
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		defer seg.Close()
		close(h.started)
		var head uint32
		for {
			select {
			case <-h.stop:
				return
			default:
			}
			if tail := r.Load(ring.SQTail); tail != head {
				sub := ring.GetSub(r.Sub(head))
				head++
				r.Store(ring.SQHead, head)
				if sub.Op == ring.OpBatch {
					h.scribe(r, sub)
					r.NotifyCQ()
				}
				continue
			}
			time.Sleep(100 * time.Microsecond) // a crude plugin: it polls
		}
	}()
	return &proto.OpenRingResponse{}, nil
}

// TestRingHostilePlugin: whatever nonsense a plugin writes into the ring
// (completions of batches never submitted, bad counts and indexes,
// messages outside the arena, a CQ tail far ahead, garbage), the host
// does not crash or mix up memory: the batch fails with ErrProtocol, the
// ring stops, and later batches go over Transfer.
func TestRingHostilePlugin(t *testing.T) {
	complete := func(r *ring.Shared, c ring.Comp) {
		tail := r.Load(ring.CQTail)
		ring.PutComp(r.Comp(tail), c)
		r.Store(ring.CQTail, tail+1)
	}
	area := func(r *ring.Shared, sub ring.Sub) ring.Area {
		a, err := ring.AreaAt(r.Arena(), sub.Area, int(sub.NOps))
		if err != nil {
			panic(err)
		}
		return a
	}
	for _, tc := range []struct {
		name   string
		scribe func(r *ring.Shared, sub ring.Sub)
	}{
		{"batch id never submitted", func(r *ring.Shared, sub ring.Sub) { complete(r, ring.Comp{ID: sub.ID + 1000}) }},
		{"batch id 0", func(r *ring.Shared, sub ring.Sub) { complete(r, ring.Comp{}) }},
		{"huge record count", func(r *ring.Shared, sub ring.Sub) { complete(r, ring.Comp{ID: sub.ID, NRec: ^uint32(0)}) }},
		{"op index out of range", func(r *ring.Shared, sub ring.Sub) {
			area(r, sub).PutRecord(0, ring.Record{Index: sub.NOps + 5, Msg: ring.NoMsg})
			complete(r, ring.Comp{ID: sub.ID, NRec: 1})
		}},
		{"message outside the arena", func(r *ring.Shared, sub ring.Sub) {
			area(r, sub).PutRecord(0, ring.Record{Index: 0, Msg: 1 << 31})
			complete(r, ring.Comp{ID: sub.ID, NRec: 1})
		}},
		{"batch message outside the arena", func(r *ring.Shared, sub ring.Sub) {
			complete(r, ring.Comp{ID: sub.ID, Flags: ring.FlagBatchError, BatchMsg: 1 << 30})
		}},
		{"CQ tail far ahead", func(r *ring.Shared, sub ring.Sub) { r.Store(ring.CQTail, r.Load(ring.CQTail)+1<<20) }},
		{"completed twice", func(r *ring.Shared, sub ring.Sub) {
			complete(r, ring.Comp{ID: sub.ID})
			complete(r, ring.Comp{ID: sub.ID})
		}},
		{"garbage over the CQ", func(r *ring.Shared, sub ring.Sub) {
			for i := uint32(0); i < r.Layout().CQEntries; i++ {
				b := r.Comp(i)
				for j := range b {
					b[j] = byte(i*7 + uint32(j))
				}
			}
			r.Store(ring.CQTail, r.Load(ring.CQTail)+3)
		}},
		{"SQ head far ahead", func(r *ring.Shared, sub ring.Sub) {
			r.Store(ring.SQHead, r.Load(ring.SQHead)+1<<20)
			complete(r, ring.Comp{ID: sub.ID})
		}},
	} {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			h := &hostilePlugin{scribe: tc.scribe, started: make(chan struct{}), stop: make(chan struct{})}
			c := rawPlugin(t, h, func(f *pluginrpc.FDReceiver) { h.fds = f })
			if c.ring.Load() == nil {
				t.Fatal("no ring")
			}
			defer func() { close(h.stop); h.wg.Wait() }()
			// The first batch meets the nonsense; the second batch (a
			// later one, or the same scribble again) must not crash
			// either; after the ring stops, batches go over Transfer.
			for i := 0; i < 3; i++ {
				res := make([]plugins.OpResult, 4)
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				err := c.Transfer(ctx, 1, ops(4), res)
				cancel()
				if i == 0 && err != nil && !errors.Is(err, errdefs.ErrProtocol) && !errors.Is(res[0].Err, errdefs.ErrProtocol) {
					t.Errorf("batch %d: %v / %v, want ErrProtocol or success", i, err, res[0].Err)
				}
				if i == 2 && (err != nil || res[0].Err != nil) {
					t.Errorf("after the ring stopped: %v / %v, want success over Transfer", err, res[0].Err)
				}
			}
			if rc := c.ring.Load(); rc == nil || rc.usable() {
				t.Error("the ring still runs after the plugin broke its protocol")
			}
			if h.transfers.Load() == 0 {
				t.Error("no batch went over Transfer after the ring stopped")
			}
		})
	}
}
