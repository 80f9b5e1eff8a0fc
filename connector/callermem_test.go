package connector_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/kvconnect/kvconnect/connector"
	"github.com/kvconnect/kvconnect/plugins/transporttest"
)

// privateMemory maps n bytes of private anonymous memory, as malloc
// does for a large buffer.
func privateMemory(t *testing.T, n int) []byte {
	t.Helper()
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(b) })
	return b
}

func addr(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b)))) }

// TestRegisterMemoryThroughPlugin registers memory the caller already
// has (a Go slice, an unaligned piece of private memory) on a node whose
// tcp transport is a plugin process, and moves bytes into and out of it
// in both roles: a peer writes into it and reads it; the node writes
// from it and reads into it.
func TestRegisterMemoryThroughPlugin(t *testing.T) {
	for _, mode := range []struct {
		name string
		opts []connector.Option
	}{{"plugin", nil}, {"in-process", []connector.Option{connector.WithInProcess("tcp")}}} {
		t.Run(mode.name, func(t *testing.T) {
			ctx := context.Background()
			a, b := newNode(t, mode.opts...), newNode(t)
			goMem := make([]byte, 1<<20)
			if mode.opts != nil {
				// In-process, the transport's goroutines write the slice
				// on the peer's behalf, ordered by a socket the race
				// detector cannot see: use memory outside Go's heap.
				goMem = privateMemory(t, 1<<20)
			}
			raw := privateMemory(t, 3<<20)
			unaligned := raw[123 : 2<<20+77]
			transporttest.Fill(goMem, 3)
			transporttest.Fill(unaligned, 4)
			before := append([]byte(nil), unaligned...)
			rg, err := a.RegisterMemory(ctx, goMem)
			if err != nil {
				t.Fatal(err)
			}
			ru, err := a.RegisterMemory(ctx, unaligned)
			if err != nil {
				t.Fatal(err)
			}
			if ru.Addr() != addr(unaligned) || rg.Addr() != addr(goMem) {
				t.Fatal("a registered buffer is published at another address than its own")
			}
			if !bytes.Equal(unaligned, before) || raw[0] != 0 {
				t.Fatal("registering changed the memory")
			}
			dst := alloc(t, b, 4<<20)
			// The peer reads the plain memory and writes into it.
			if err := b.TransferSyncRead(ctx, a.SessionID(), dst.Addr(), ru.Addr(), uint64(ru.Len())); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(dst.Bytes()[:ru.Len()], unaligned) {
				t.Fatal("peer READ of registered plain memory: bytes differ")
			}
			transporttest.Fill(dst.Bytes(), 5)
			if err := b.TransferSyncWrite(ctx, a.SessionID(), dst.Addr(), rg.Addr()+100, 500000); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(goMem[100:500100], dst.Bytes()[:500000]) {
				t.Fatal("peer WRITE into a registered Go slice: bytes differ")
			}
			// The node moves bytes from and into plain memory.
			transporttest.Fill(unaligned, 6)
			if err := a.TransferSyncWrite(ctx, b.SessionID(), ru.Addr()+1, dst.Addr(), uint64(ru.Len()-1)); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(dst.Bytes()[:ru.Len()-1], unaligned[1:]) {
				t.Fatal("WRITE from registered plain memory: bytes differ")
			}
			if err := a.TransferSyncRead(ctx, b.SessionID(), rg.Addr(), dst.Addr()+(1<<20), 1<<20); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(goMem, dst.Bytes()[1<<20:2<<20]) {
				t.Fatal("READ into a registered Go slice: bytes differ")
			}
			// Free puts the memory back, contents kept; peers can no
			// longer reach it.
			want := append([]byte(nil), unaligned...)
			if err := ru.Free(ctx); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(unaligned, want) {
				t.Fatal("Free changed the memory's contents")
			}
			err = b.TransferSyncWrite(ctx, a.SessionID(), dst.Addr(), addr(unaligned), 100)
			if !errors.Is(err, connector.ErrUnknownRegion) && !errors.Is(err, connector.ErrOutOfBounds) {
				t.Fatalf("peer WRITE into freed memory: %v, want it refused", err)
			}
			if !bytes.Equal(unaligned, want) {
				t.Fatal("a peer wrote into memory after it was freed")
			}
			unaligned[0] = 1 // still ordinary, writable memory
		})
	}
}

// TestRegisterMemoryBatchSharedPages registers 1,000 buffers packed into
// one piece of memory, neighbours sharing pages, in one batch, and has a
// peer write a distinct pattern into each: every byte lands where it
// should, and freeing half of them leaves the others reachable.
func TestRegisterMemoryBatchSharedPages(t *testing.T) {
	ctx := context.Background()
	a, b := newNode(t), newNode(t)
	const n, size = 1000, 3000
	mem := privateMemory(t, n*size)
	bufs := make([][]byte, n)
	for i := range bufs {
		bufs[i] = mem[i*size : (i+1)*size : (i+1)*size]
	}
	regions, err := a.RegisterMemoryBatch(ctx, bufs)
	if err != nil {
		t.Fatal(err)
	}
	src := alloc(t, b, n*size)
	transporttest.Fill(src.Bytes(), 7)
	locals, remotes, lens := make([]uint64, n), make([]uint64, n), make([]uint64, n)
	for i := range bufs {
		locals[i], remotes[i], lens[i] = src.Addr()+uint64(i*size), regions[i].Addr(), size
	}
	if err := b.BatchTransferSync(ctx, connector.OpWrite, a.SessionID(), locals, remotes, lens); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(mem, src.Bytes()) {
		t.Fatal("batch WRITE into 1,000 packed buffers: bytes differ")
	}
	for i := 0; i < n; i += 2 {
		if err := regions[i].Free(ctx); err != nil {
			t.Fatal(err)
		}
	}
	transporttest.Fill(src.Bytes(), 8)
	for i := 1; i < n; i += 2 {
		if err := b.TransferSyncWrite(ctx, a.SessionID(), src.Addr()+uint64(i*size), regions[i].Addr(), size); err != nil {
			t.Fatalf("buffer %d after its neighbours were freed: %v", i, err)
		}
		if !bytes.Equal(bufs[i], src.Bytes()[i*size:(i+1)*size]) {
			t.Fatalf("buffer %d: bytes differ", i)
		}
	}
}

func TestRegisterMemoryRefusals(t *testing.T) {
	ctx := context.Background()
	a := newNode(t)
	mem := privateMemory(t, 1<<20)
	r, err := a.RegisterMemory(ctx, mem[4096:8192])
	if err != nil {
		t.Fatal(err)
	}
	managed := alloc(t, a, 4096)
	for name, tc := range map[string]struct {
		mems [][]byte
		want []error
	}{
		"overlapping a registered buffer": {[][]byte{mem[8000:9000]}, []error{connector.ErrAddressOverlap, connector.ErrInvalidArgument}},
		"containing a registered buffer":  {[][]byte{mem[0:16384]}, []error{connector.ErrAddressOverlap, connector.ErrInvalidArgument}},
		"inside managed memory":           {[][]byte{managed.Bytes()[10:20]}, []error{connector.ErrAddressOverlap}},
		"overlapping each other":          {[][]byte{mem[20000:30000], mem[29999:40000]}, []error{connector.ErrAddressOverlap}},
		"empty":                           {[][]byte{mem[0:0]}, []error{connector.ErrInvalidArgument}},
		"read-only":                       {[][]byte{readOnly(t)}, []error{connector.ErrInvalidArgument}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := a.RegisterMemoryBatch(ctx, tc.mems)
			for _, w := range tc.want {
				if !errors.Is(err, w) {
					t.Fatalf("err %v, want %v", err, w)
				}
			}
			t.Log(err)
		})
	}
	// The refusals left the registered buffer as it was.
	mem[5000] = 9
	b := newNode(t)
	dst := alloc(t, b, 4096)
	if err := b.TransferSyncRead(ctx, a.SessionID(), dst.Addr(), r.Addr(), 4096); err != nil || dst.Bytes()[5000-4096] != 9 {
		t.Fatalf("registered buffer after refusals: %v", err)
	}
}

func readOnly(t *testing.T) []byte {
	b, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(b) })
	return b
}

// TestFreeMemoryWhileWritesLand frees registered plain memory while a
// peer keeps writing into it: no crash, and once Free returned not one
// more byte lands.
func TestFreeMemoryWhileWritesLand(t *testing.T) {
	ctx := context.Background()
	a, b := newNode(t), newNode(t)
	mem := privateMemory(t, 8<<20)
	r, err := a.RegisterMemory(ctx, mem)
	if err != nil {
		t.Fatal(err)
	}
	src := alloc(t, b, 1<<20)
	transporttest.Fill(src.Bytes(), 9)
	stop := make(chan struct{})
	started := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		once := sync.OnceFunc(func() { close(started) })
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			b.TransferSyncWrite(ctx, a.SessionID(), src.Addr(), r.Addr()+uint64(i%8)<<20, 1<<20)
			once()
		}
	}()
	<-started
	if err := r.Free(ctx); err != nil {
		t.Fatal(err)
	}
	snapshot := append([]byte(nil), mem...)
	// Writes keep coming for a while: every one is refused.
	for i := 0; i < 20; i++ {
		if err := b.TransferSyncWrite(ctx, a.SessionID(), src.Addr(), r.Addr(), 4096); err == nil {
			t.Fatal("a peer WRITE into freed memory succeeded")
		}
	}
	close(stop)
	wg.Wait()
	if !bytes.Equal(mem, snapshot) {
		t.Fatal("memory changed after Free returned")
	}
}

// TestAllocBatch allocates many regions in one batch through a plugin
// and writes into the last of them from a peer.
func TestAllocBatch(t *testing.T) {
	ctx := context.Background()
	a, b := newNode(t), newNode(t)
	sizes := make([]int, 2000)
	for i := range sizes {
		sizes[i] = 4096 + i
	}
	regions, err := a.AllocBatch(ctx, sizes)
	if err != nil {
		t.Fatal(err)
	}
	if len(regions) != len(sizes) {
		t.Fatalf("%d regions for %d sizes", len(regions), len(sizes))
	}
	last := regions[len(regions)-1]
	src := alloc(t, b, last.Len())
	transporttest.Fill(src.Bytes(), 11)
	if err := b.TransferSyncWrite(ctx, a.SessionID(), src.Addr(), last.Addr(), uint64(last.Len())); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(last.Bytes(), src.Bytes()) {
		t.Fatal("bytes differ")
	}
	if _, err := a.AllocBatch(ctx, []int{4096, 0}); !errors.Is(err, connector.ErrInvalidArgument) {
		t.Fatalf("a zero size: %v, want ErrInvalidArgument", err)
	}
}

// TestCloseGivesRegisteredMemoryBack: closing a node puts memory it had
// registered in place back as ordinary private memory, contents kept.
func TestCloseGivesRegisteredMemoryBack(t *testing.T) {
	ctx := context.Background()
	cfg := connector.Config{Protocol: "tcp", PluginDir: pluginDir(t)}
	a, err := connector.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	mem := privateMemory(t, 1<<20)
	transporttest.Fill(mem, 12)
	want := append([]byte(nil), mem...)
	if _, err := a.RegisterMemory(ctx, mem[100:]); err != nil {
		t.Fatal(err)
	}
	if !sharedMapping(t, mem) {
		t.Fatal("registered memory is not a shared mapping")
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if sharedMapping(t, mem) {
		t.Fatal("after Close the memory is still a shared mapping")
	}
	if !bytes.Equal(mem, want) {
		t.Fatal("Close changed the memory's contents")
	}
}

// sharedMapping says whether /proc/self/maps shows mem's first page as
// a shared mapping.
func sharedMapping(t *testing.T, mem []byte) bool {
	t.Helper()
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	a := addr(mem)
	for _, line := range strings.Split(string(maps), "\n") {
		var lo, hi uint64
		var perms string
		if _, err := fmt.Sscanf(line, "%x-%x %s", &lo, &hi, &perms); err == nil && lo <= a && a < hi {
			return strings.HasSuffix(perms, "s")
		}
	}
	t.Fatalf("0x%x is not mapped", a)
	return false
}
