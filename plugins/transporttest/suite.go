// Package transporttest is the conformance suite every kvconnect transport
// runs, in-process and as a subprocess plugin: round trips of many sizes
// at unaligned offsets, large and concurrent batches, READ and WRITE,
// absolute addressing, bounds and unknown-region rejection with the
// neighbouring memory checked, a peer closing mid-batch, and Close with
// ops in flight.
//
// A transport's test calls Run with a Harness:
//
//	func TestConformance(t *testing.T) {
//		transporttest.Run(t, transporttest.Harness{
//			New: func(t *testing.T) plugins.Transport { return mytransport.New() },
//		})
//	}
package transporttest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/kvconnect/kvconnect/internal/shm"
	"github.com/kvconnect/kvconnect/plugins"
)

// Harness tells the suite how to make the transport under test.
type Harness struct {
	// New returns a new, uninitialised transport for one node. It is
	// called once per node; the suite closes what it returns.
	New func(t *testing.T) plugins.Transport
	// Options is the transport's options JSON passed to Init (may be nil).
	Options []byte
	// Hostname is passed to Init; default "127.0.0.1".
	Hostname string
	// MaxSize is the largest single op tried; default 64 MiB.
	MaxSize int
	// FailWithin bounds how long a batch may take to fail after its peer
	// closes or the local transport closes; default 10s.
	FailWithin time.Duration
}

func (h *Harness) defaults() {
	if h.Hostname == "" {
		h.Hostname = "127.0.0.1"
	}
	if h.MaxSize == 0 {
		h.MaxSize = 64 << 20
	}
	if h.FailWithin == 0 {
		h.FailWithin = 10 * time.Second
	}
}

// Node is one initialised transport with the regions the suite gave it.
type Node struct {
	T        plugins.Transport
	Endpoint []byte
	Name     string
	nextID   plugins.RegionID
	mu       sync.Mutex
	regions  map[plugins.RegionID]*Mem
}

// Mem is a registered region and the segment it lives in.
type Mem struct {
	ID     plugins.RegionID
	Addr   uint64 // published address of the region's first byte
	Seg    *shm.Segment
	Bytes  []byte // the registered range
	Key    []byte
	offset int
}

// NewNode initialises a transport from the harness and registers cleanup.
func NewNode(t *testing.T, h Harness, name string) *Node {
	t.Helper()
	h.defaults()
	tr := h.New(t)
	n := &Node{T: tr, Name: name, regions: map[plugins.RegionID]*Mem{}}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := tr.Close(ctx); err != nil {
			t.Errorf("%s: Close: %v", name, err)
		}
		n.mu.Lock()
		defer n.mu.Unlock()
		for _, m := range n.regions {
			m.Seg.Close()
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := tr.Init(ctx, plugins.InitRequest{Hostname: h.Hostname, Metadata: "P2PHANDSHAKE", Options: h.Options})
	if err != nil {
		t.Fatalf("%s: Init: %v", name, err)
	}
	n.Endpoint = res.Endpoint
	return n
}

// Alloc registers a region of size bytes. With guard > 0 the region sits
// guard bytes into a shared-memory segment that has guard bytes after it
// too, so tests can check that memory next to the region stays untouched.
func (n *Node) Alloc(t *testing.T, size, guard int) *Mem {
	t.Helper()
	seg, err := shm.New(n.Name, size+2*guard)
	if err != nil {
		t.Fatal(err)
	}
	all := seg.Bytes()
	mem := all[guard : guard+size : guard+size]
	n.mu.Lock()
	n.nextID++
	id := n.nextID
	n.mu.Unlock()
	m := &Mem{ID: id, Addr: uint64(uintptr(unsafe.Pointer(&mem[0]))), Seg: seg, Bytes: mem, offset: guard}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	key, err := n.T.RegisterRegion(ctx, plugins.Region{ID: id, Addr: m.Addr, Mem: mem, File: seg.File(), FileOffset: uint64(guard)})
	if err != nil {
		seg.Close()
		t.Fatalf("%s: RegisterRegion(%d bytes): %v", n.Name, size, err)
	}
	m.Key = key
	n.mu.Lock()
	n.regions[id] = m
	n.mu.Unlock()
	return m
}

// Free deregisters a region and unmaps it.
func (n *Node) Free(t *testing.T, m *Mem) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.T.DeregisterRegion(ctx, m.ID); err != nil {
		t.Fatalf("%s: DeregisterRegion(%d): %v", n.Name, m.ID, err)
	}
	n.mu.Lock()
	delete(n.regions, m.ID)
	n.mu.Unlock()
	m.Seg.Close()
}

// Info returns the node as a peer sees it.
func (n *Node) Info() plugins.PeerInfo {
	n.mu.Lock()
	defer n.mu.Unlock()
	pi := plugins.PeerInfo{Name: n.Name, Endpoint: n.Endpoint}
	for _, m := range n.regions {
		pi.Regions = append(pi.Regions, plugins.RemoteRegion{ID: m.ID, Addr: m.Addr, Size: uint64(len(m.Bytes)), Key: m.Key})
	}
	return pi
}

// Connect opens peer from n.
func (n *Node) Connect(t *testing.T, peer *Node) plugins.PeerID {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	id, err := n.T.Connect(ctx, peer.Info())
	if err != nil {
		t.Fatalf("%s: Connect(%s): %v", n.Name, peer.Name, err)
	}
	return id
}

// Transfer runs ops and returns the per-op results and the batch error.
func (n *Node) Transfer(t *testing.T, peer plugins.PeerID, ops []plugins.Op) ([]plugins.OpResult, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res := make([]plugins.OpResult, len(ops))
	err := n.T.Transfer(ctx, peer, ops, res)
	return res, err
}

// MustTransfer runs ops and fails the test on any error.
func (n *Node) MustTransfer(t *testing.T, peer plugins.PeerID, ops []plugins.Op) {
	t.Helper()
	res, err := n.Transfer(t, peer, ops)
	if err != nil {
		t.Fatalf("%s: Transfer: %v", n.Name, err)
	}
	for i, r := range res {
		if r.Err != nil {
			t.Fatalf("%s: op %d (%+v): %v", n.Name, i, ops[i], r.Err)
		}
	}
}

// Fill writes a deterministic pattern derived from seed into b.
func Fill(b []byte, seed uint64) {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	i := 0
	for ; i+8 <= len(b); i += 8 {
		v := r.Uint64()
		b[i], b[i+1], b[i+2], b[i+3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
		b[i+4], b[i+5], b[i+6], b[i+7] = byte(v>>32), byte(v>>40), byte(v>>48), byte(v>>56)
	}
	for v := r.Uint64(); i < len(b); i++ {
		b[i] = byte(v)
		v >>= 8
	}
}

func equal(t *testing.T, what string, got, want []byte) {
	t.Helper()
	if bytes.Equal(got, want) {
		return
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("%s: %d bytes differ, first at byte %d: got 0x%02x want 0x%02x", what, len(got), i, got[i], want[i])
		}
	}
	t.Fatalf("%s: lengths differ: %d vs %d", what, len(got), len(want))
}

// Run runs the whole conformance suite.
func Run(t *testing.T, h Harness) {
	h.defaults()
	t.Run("RoundTripSizes", func(t *testing.T) { testRoundTripSizes(t, h) })
	t.Run("LargeBatch", func(t *testing.T) { testLargeBatch(t, h) })
	t.Run("ConcurrentBatches", func(t *testing.T) { testConcurrentBatches(t, h) })
	t.Run("AbsoluteAddress", func(t *testing.T) { testAbsoluteAddress(t, h) })
	t.Run("OutOfBoundsRejected", func(t *testing.T) { testOutOfBounds(t, h) })
	t.Run("UnknownRejected", func(t *testing.T) { testUnknown(t, h) })
	t.Run("DeregisteredRegionRejected", func(t *testing.T) { testDeregistered(t, h) })
	t.Run("PeerClosedMidBatch", func(t *testing.T) { testPeerClosedMidBatch(t, h) })
	t.Run("CloseWithOpsInFlight", func(t *testing.T) { testCloseInFlight(t, h) })
}

func pair(t *testing.T, h Harness) (a, b *Node) {
	return NewNode(t, h, "node-a"), NewNode(t, h, "node-b")
}

func testRoundTripSizes(t *testing.T, h Harness) {
	a, b := pair(t, h)
	max := h.MaxSize
	src := a.Alloc(t, max+64, 0)
	back := a.Alloc(t, max+64, 0)
	dst := b.Alloc(t, max+64, 0)
	peer := a.Connect(t, b)
	sizes := []int{1, 7, 4095, 4096, 4097, 65536 + 13, 1<<20 + 3, 4<<20 - 1, 16 << 20, max}
	for i, size := range sizes {
		if size > max {
			continue
		}
		srcOff, dstOff := uint64(i%7), uint64((i*13)%61) // unaligned
		Fill(src.Bytes[srcOff:srcOff+uint64(size)], uint64(size))
		a.MustTransfer(t, peer, []plugins.Op{{Kind: plugins.OpWrite, LocalRegion: src.ID, LocalOffset: srcOff, RemoteRegion: dst.ID, RemoteOffset: dstOff, Length: uint64(size)}})
		equal(t, fmt.Sprintf("WRITE %d bytes", size), dst.Bytes[dstOff:dstOff+uint64(size)], src.Bytes[srcOff:srcOff+uint64(size)])
		clear(back.Bytes[:size+16])
		a.MustTransfer(t, peer, []plugins.Op{{Kind: plugins.OpRead, LocalRegion: back.ID, LocalOffset: 5, RemoteRegion: dst.ID, RemoteOffset: dstOff, Length: uint64(size)}})
		equal(t, fmt.Sprintf("READ %d bytes", size), back.Bytes[5:5+size], src.Bytes[srcOff:srcOff+uint64(size)])
		if back.Bytes[4] != 0 || back.Bytes[5+size] != 0 {
			t.Fatalf("READ %d bytes wrote outside its local range", size)
		}
	}
}

func testLargeBatch(t *testing.T, h Harness) {
	a, b := pair(t, h)
	const nops = 500
	r := rand.New(rand.NewPCG(1, 2))
	sizes := make([]int, nops)
	total := 0
	for i := range sizes {
		sizes[i] = 1 + r.IntN(20000)
		total += sizes[i]
	}
	src := a.Alloc(t, total, 0)
	dst := b.Alloc(t, total, 0)
	back := a.Alloc(t, total, 0)
	Fill(src.Bytes, 77)
	peer := a.Connect(t, b)
	ops := make([]plugins.Op, nops)
	off := uint64(0)
	for i, s := range sizes {
		ops[i] = plugins.Op{Kind: plugins.OpWrite, LocalRegion: src.ID, LocalOffset: off, RemoteRegion: dst.ID, RemoteOffset: off, Length: uint64(s)}
		off += uint64(s)
	}
	a.MustTransfer(t, peer, ops)
	equal(t, "batch WRITE", dst.Bytes, src.Bytes)
	for i := range ops {
		ops[i].Kind = plugins.OpRead
		ops[i].LocalRegion = back.ID
	}
	a.MustTransfer(t, peer, ops)
	equal(t, "batch READ", back.Bytes, src.Bytes)
}

func testConcurrentBatches(t *testing.T, h Harness) {
	a, b := pair(t, h)
	const workers, nops, size = 8, 64, 16 << 10
	src := a.Alloc(t, workers*nops*size, 0)
	dst := b.Alloc(t, workers*nops*size, 0)
	Fill(src.Bytes, 5)
	peer := a.Connect(t, b)
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			ops := make([]plugins.Op, nops)
			for i := range ops {
				off := uint64((w*nops + i) * size)
				kind := plugins.OpWrite
				ops[i] = plugins.Op{Kind: kind, LocalRegion: src.ID, LocalOffset: off, RemoteRegion: dst.ID, RemoteOffset: off, Length: size}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			res := make([]plugins.OpResult, nops)
			if err := a.T.Transfer(ctx, peer, ops, res); err != nil {
				errs <- err
				return
			}
			for i, r := range res {
				if r.Err != nil {
					errs <- fmt.Errorf("worker %d op %d: %w", w, i, r.Err)
					return
				}
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	equal(t, "concurrent WRITEs", dst.Bytes, src.Bytes)
}

func testAbsoluteAddress(t *testing.T, h Harness) {
	a, b := pair(t, h)
	info, err := a.T.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.Capabilities&plugins.CapAbsoluteAddress == 0 {
		t.Skipf("%s does not report CapAbsoluteAddress", info.Name)
	}
	src := a.Alloc(t, 1<<20, 0)
	back := a.Alloc(t, 1<<20, 0)
	dst1 := b.Alloc(t, 1<<20, 0)
	dst2 := b.Alloc(t, 1<<20, 0)
	Fill(src.Bytes, 9)
	peer := a.Connect(t, b)
	a.MustTransfer(t, peer, []plugins.Op{
		{Kind: plugins.OpWrite, LocalRegion: 0, LocalOffset: src.Addr, RemoteOffset: dst1.Addr + 100, Length: 1000},
		{Kind: plugins.OpWrite, LocalRegion: src.ID, LocalOffset: 2000, RemoteOffset: dst2.Addr + 333, Length: 700000},
	})
	equal(t, "absolute WRITE 1", dst1.Bytes[100:1100], src.Bytes[:1000])
	equal(t, "absolute WRITE 2", dst2.Bytes[333:333+700000], src.Bytes[2000:702000])
	a.MustTransfer(t, peer, []plugins.Op{{Kind: plugins.OpRead, LocalRegion: 0, LocalOffset: back.Addr + 1, RemoteOffset: dst2.Addr + 333, Length: 700000}})
	equal(t, "absolute READ", back.Bytes[1:700001], src.Bytes[2000:702000])
}

func testOutOfBounds(t *testing.T, h Harness) {
	a, b := pair(t, h)
	const size, guard = 64 << 10, 8 << 10
	src := a.Alloc(t, size, 0)
	dst := b.Alloc(t, size, guard)
	Fill(src.Bytes, 3)
	whole := dst.Seg.Bytes()
	Fill(whole, 4)
	before := bytes.Clone(whole)
	peer := a.Connect(t, b)
	info, _ := a.T.Info(context.Background())
	ops := []plugins.Op{
		{Kind: plugins.OpWrite, LocalRegion: src.ID, RemoteRegion: dst.ID, RemoteOffset: size - 100, Length: 200},
		{Kind: plugins.OpWrite, LocalRegion: src.ID, RemoteRegion: dst.ID, RemoteOffset: size, Length: 1},
		{Kind: plugins.OpWrite, LocalRegion: src.ID, RemoteRegion: dst.ID, RemoteOffset: 1 << 40, Length: 16},
		{Kind: plugins.OpRead, LocalRegion: src.ID, RemoteRegion: dst.ID, RemoteOffset: size - 1, Length: 2},
	}
	if info.Capabilities&plugins.CapAbsoluteAddress != 0 {
		ops = append(ops,
			plugins.Op{Kind: plugins.OpWrite, LocalRegion: src.ID, RemoteOffset: dst.Addr + size - 10, Length: 20},
			plugins.Op{Kind: plugins.OpWrite, LocalRegion: src.ID, RemoteOffset: dst.Addr - 10, Length: 20},
		)
	}
	res, _ := a.Transfer(t, peer, ops)
	for i, r := range res {
		if !errors.Is(r.Err, plugins.ErrOutOfBounds) && !errors.Is(r.Err, plugins.ErrUnknownRegion) {
			t.Errorf("op %d (%+v): got %v, want ErrOutOfBounds or ErrUnknownRegion", i, ops[i], r.Err)
		}
	}
	if !errors.Is(res[0].Err, plugins.ErrOutOfBounds) {
		t.Errorf("WRITE past the end: got %v, want ErrOutOfBounds", res[0].Err)
	}
	equal(t, "target memory and its neighbours after refused WRITEs", whole, before)
	// The local side is checked too: a READ into a too-small local range.
	res, _ = a.Transfer(t, peer, []plugins.Op{{Kind: plugins.OpRead, LocalRegion: src.ID, LocalOffset: size - 10, RemoteRegion: dst.ID, Length: 20}})
	if !errors.Is(res[0].Err, plugins.ErrOutOfBounds) {
		t.Errorf("READ past the end of the local region: got %v, want ErrOutOfBounds", res[0].Err)
	}
	// The connection still works after refusals.
	a.MustTransfer(t, peer, []plugins.Op{{Kind: plugins.OpWrite, LocalRegion: src.ID, RemoteRegion: dst.ID, Length: size}})
	equal(t, "WRITE after refusals", dst.Bytes, src.Bytes)
}

func testUnknown(t *testing.T, h Harness) {
	a, b := pair(t, h)
	src := a.Alloc(t, 4096, 0)
	dst := b.Alloc(t, 4096, 0)
	peer := a.Connect(t, b)
	res, _ := a.Transfer(t, peer, []plugins.Op{
		{Kind: plugins.OpWrite, LocalRegion: src.ID, RemoteRegion: dst.ID + 1000, Length: 10},
		{Kind: plugins.OpRead, LocalRegion: src.ID, RemoteRegion: dst.ID + 1000, Length: 10},
		{Kind: plugins.OpWrite, LocalRegion: src.ID + 1000, RemoteRegion: dst.ID, Length: 10},
	})
	for i, r := range res {
		if !errors.Is(r.Err, plugins.ErrUnknownRegion) {
			t.Errorf("op %d: got %v, want ErrUnknownRegion", i, r.Err)
		}
	}
	res = make([]plugins.OpResult, 1)
	err := a.T.Transfer(context.Background(), peer+1000, []plugins.Op{{Kind: plugins.OpWrite, LocalRegion: src.ID, RemoteRegion: dst.ID, Length: 10}}, res)
	if !errors.Is(err, plugins.ErrUnknownPeer) || !errors.Is(res[0].Err, plugins.ErrUnknownPeer) {
		t.Errorf("unknown peer: got %v / %v, want ErrUnknownPeer", err, res[0].Err)
	}
	res, _ = a.Transfer(t, peer, []plugins.Op{{Kind: 7, LocalRegion: src.ID, RemoteRegion: dst.ID, Length: 10}, {Kind: plugins.OpWrite, LocalRegion: src.ID, RemoteRegion: dst.ID, Length: 0}})
	for i, r := range res {
		if !errors.Is(r.Err, plugins.ErrInvalidArgument) {
			t.Errorf("invalid op %d: got %v, want ErrInvalidArgument", i, r.Err)
		}
	}
}

func testDeregistered(t *testing.T, h Harness) {
	a, b := pair(t, h)
	src := a.Alloc(t, 4096, 0)
	dst := b.Alloc(t, 4096, 0)
	peer := a.Connect(t, b)
	a.MustTransfer(t, peer, []plugins.Op{{Kind: plugins.OpWrite, LocalRegion: src.ID, RemoteRegion: dst.ID, Length: 4096}})
	id := dst.ID
	b.Free(t, dst)
	res, _ := a.Transfer(t, peer, []plugins.Op{{Kind: plugins.OpWrite, LocalRegion: src.ID, RemoteRegion: id, Length: 4096}})
	if !errors.Is(res[0].Err, plugins.ErrUnknownRegion) {
		t.Errorf("WRITE to a deregistered region: got %v, want ErrUnknownRegion", res[0].Err)
	}
}

// bigBatch returns a batch of WRITEs large enough to still be in flight
// shortly after it starts.
func bigBatch(src, dst *Mem, n, size int) []plugins.Op {
	ops := make([]plugins.Op, n)
	for i := range ops {
		ops[i] = plugins.Op{Kind: plugins.OpWrite, LocalRegion: src.ID, RemoteRegion: dst.ID, RemoteOffset: uint64((i * size) % len(dst.Bytes)), Length: uint64(size)}
	}
	return ops
}

func failedOps(res []plugins.OpResult) (failed int, bad error) {
	for _, r := range res {
		if r.Err == nil {
			continue
		}
		failed++
		if !errors.Is(r.Err, plugins.ErrPeerUnreachable) && !errors.Is(r.Err, plugins.ErrClosed) &&
			!errors.Is(r.Err, plugins.ErrTimeout) && !errors.Is(r.Err, plugins.ErrCanceled) && bad == nil {
			bad = r.Err
		}
	}
	return failed, bad
}

func testPeerClosedMidBatch(t *testing.T, h Harness) {
	a, b := pair(t, h)
	const size = 1 << 20
	src := a.Alloc(t, size, 0)
	dst := b.Alloc(t, 16*size, 0)
	peer := a.Connect(t, b)
	ops := bigBatch(src, dst, 4096, size) // 4 GiB: far longer than the close below
	done := make(chan struct{})
	var res []plugins.OpResult
	start := time.Now()
	go func() {
		defer close(done)
		res, _ = a.Transfer(t, peer, ops)
	}()
	time.Sleep(20 * time.Millisecond)
	closed := time.Now()
	if err := b.T.Close(context.Background()); err != nil {
		t.Fatalf("closing the peer: %v", err)
	}
	select {
	case <-done:
	case <-time.After(h.FailWithin):
		t.Fatalf("batch still running %v after its peer closed", h.FailWithin)
	}
	failed, bad := failedOps(res)
	t.Logf("batch ended %v after the peer closed (%v after start); %d of %d ops failed", time.Since(closed), time.Since(start), failed, len(ops))
	if failed == 0 {
		t.Fatal("no op failed although the peer closed mid-batch")
	}
	if bad != nil {
		t.Fatalf("op failed with %v, want ErrPeerUnreachable, ErrClosed or ErrTimeout", bad)
	}
}

func testCloseInFlight(t *testing.T, h Harness) {
	a, b := pair(t, h)
	const size = 1 << 20
	src := a.Alloc(t, size, 0)
	dst := b.Alloc(t, 16*size, 0)
	peer := a.Connect(t, b)
	ops := bigBatch(src, dst, 4096, size)
	done := make(chan struct{})
	var res []plugins.OpResult
	go func() {
		defer close(done)
		res, _ = a.Transfer(t, peer, ops)
	}()
	time.Sleep(20 * time.Millisecond)
	if err := a.T.Close(context.Background()); err != nil {
		t.Fatalf("Close with ops in flight: %v", err)
	}
	select {
	case <-done:
	case <-time.After(h.FailWithin):
		t.Fatalf("batch still running %v after Close", h.FailWithin)
	}
	failed, bad := failedOps(res)
	if failed == 0 {
		t.Fatal("no op failed although the transport closed mid-batch")
	}
	if bad != nil {
		t.Fatalf("op failed with %v, want ErrClosed", bad)
	}
	if err := a.T.Close(context.Background()); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	r := make([]plugins.OpResult, 1)
	if err := a.T.Transfer(context.Background(), peer, ops[:1], r); !errors.Is(err, plugins.ErrClosed) {
		t.Fatalf("Transfer after Close: got %v, want ErrClosed", err)
	}
}
