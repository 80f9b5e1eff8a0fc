package transporttest

import (
	"bytes"
	"context"
	"encoding/binary"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/kvconnect/kvconnect/internal/pluginrpc"
	"github.com/kvconnect/kvconnect/internal/ring"
	"github.com/kvconnect/kvconnect/internal/shm"
	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/plugins/host"
)

// Node is one initialised transport with the regions the suite gave it.
type Node struct {
	T        plugins.Transport
	Endpoint []byte
	Name     string
	nextID   plugins.RegionID
	mu       sync.Mutex
	regions  map[plugins.RegionID]*Mem
}

// Mem is a registered region of shared memory.
type Mem struct {
	ID    plugins.RegionID
	Addr  uint64 // published address of the region's first byte
	Bytes []byte // the registered range
	Key   []byte
	seg   *shm.Segment
	guard int
}

// Whole is the region with the guard bytes around it (see Node.Alloc).
func (m *Mem) Whole() []byte { return m.seg.Bytes() }

// NewNode makes a transport with h.New, initialises it, and closes it (and
// frees its regions) when the test ends.
func NewNode(t *testing.T, h Harness, name string) *Node {
	t.Helper()
	h.defaults()
	n := newNode(t, h, name)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := n.T.Init(ctx, initReq(h))
	if err != nil {
		t.Fatalf("%s: Init: %v", name, err)
	}
	n.Endpoint = res.Endpoint
	// Behind the plugin protocol, batches take the shared-memory rings
	// unless they are turned off.
	if dp := host.DataPath(n.T); dp != "" && ring.Supported && os.Getenv(pluginrpc.EnvRings) != "0" && dp != "ring" {
		t.Fatalf("%s: batches go over %s, not the shared-memory ring", name, dp)
	}
	if h.PeerEndpoint != nil {
		n.Endpoint = h.PeerEndpoint(res.Endpoint)
	}
	return n
}

// newNode makes the transport without initialising it.
func newNode(t *testing.T, h Harness, name string) *Node {
	t.Helper()
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
			m.seg.Close()
		}
	})
	return n
}

// newMem allocates a region of size bytes with guard bytes on each side,
// not yet registered.
func (n *Node) newMem(t *testing.T, size, guard int) *Mem {
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
	return &Mem{ID: id, Addr: uint64(uintptr(unsafe.Pointer(&mem[0]))), seg: seg, Bytes: mem, guard: guard}
}

// region is m as the transport registers it.
func (m *Mem) region() plugins.Region {
	return plugins.Region{ID: m.ID, Addr: m.Addr, Mem: m.Bytes, File: m.seg.File(), FileOffset: uint64(m.guard)}
}

// Alloc registers a region of size bytes. With guard > 0 the region sits
// guard bytes into a shared-memory segment that has guard bytes after it
// too, so tests can check that memory next to the region stays untouched
// (Mem.Whole).
func (n *Node) Alloc(t *testing.T, size, guard int) *Mem {
	t.Helper()
	m := n.newMem(t, size, guard)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	key, err := n.T.RegisterRegion(ctx, m.region())
	if err != nil {
		m.seg.Close()
		t.Fatalf("%s: RegisterRegion(%d bytes): %v", n.Name, size, err)
	}
	m.Key = key
	n.mu.Lock()
	n.regions[m.ID] = m
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
	m.seg.Close()
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
	// One 64 KiB block of the seed's random bytes, copied block after
	// block, with the first word of every 4 KiB of a later block xored
	// with its offset, so no two blocks are alike: far cheaper than a
	// random word per 8 bytes under the race detector, which instruments
	// each store (a copy is one range), and every byte still depends on
	// the seed and on where it is.
	const blockSize, page = 64 << 10, 4 << 10
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	block := make([]byte, (min(len(b), blockSize)+7)&^7)
	for i := 0; i < len(block); i += 8 {
		binary.LittleEndian.PutUint64(block[i:], r.Uint64())
	}
	for off := 0; off < len(b); off += blockSize {
		n := copy(b[off:], block)
		for p := 0; off > 0 && p+8 <= n; p += page {
			binary.LittleEndian.PutUint64(b[off+p:], binary.LittleEndian.Uint64(block[p:])^uint64(off))
		}
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

func pair(t *testing.T, h Harness) (a, b *Node) {
	return NewNode(t, h, "node-a"), NewNode(t, h, "node-b")
}
