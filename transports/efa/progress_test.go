package efa_test

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/kvconnect/kvconnect/internal/testbin"
	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/plugins/transporttest"
	"github.com/kvconnect/kvconnect/transports/efa"
)

func harness(opts string) transporttest.Harness {
	return transporttest.Harness{
		New:     func(t *testing.T) plugins.Transport { return &loggedTransport{Transport: efa.New(), t: t} },
		Options: []byte(opts),
	}
}

// Both providers progress data only when the target calls into them
// (FI_PROGRESS_MANUAL). The target here never calls its transport after
// Connect: its progress thread alone must serve the initiator's writes
// and reads, or they hang until the context ends.
func TestIdleTargetProgresses(t *testing.T) {
	for _, p := range softProviders {
		t.Run(p.name, func(t *testing.T) {
			h := harness(p.opts)
			a, b := transporttest.NewNode(t, h, "initiator"), transporttest.NewNode(t, h, "idle-target")
			const n, size = 64, 1 << 20
			src := a.Alloc(t, n*size, 0)
			back := a.Alloc(t, n*size, 0)
			dst := b.Alloc(t, n*size, 0)
			transporttest.Fill(src.Bytes, 11)
			peer := a.Connect(t, b)
			ops := make([]plugins.Op, n)
			for i := range ops {
				off := uint64(i * size)
				ops[i] = plugins.Op{Kind: plugins.OpWrite, LocalRegion: src.ID, LocalOffset: off, RemoteRegion: dst.ID, RemoteOffset: off, Length: size}
			}
			ctx, cancel := context.WithTimeout(context.Background(), testbin.WaitLimit)
			defer cancel()
			res := make([]plugins.OpResult, n)
			start := time.Now()
			if err := a.T.Transfer(ctx, peer, ops, res); err != nil {
				t.Fatal(err)
			}
			for i := range ops {
				ops[i].Kind = plugins.OpRead
				ops[i].LocalRegion = back.ID
			}
			if err := a.T.Transfer(ctx, peer, ops, res); err != nil {
				t.Fatal(err)
			}
			for i, r := range res {
				if r.Err != nil {
					t.Fatalf("op %d with the target idle: %v", i, r.Err)
				}
			}
			if string(back.Bytes) != string(src.Bytes) || string(dst.Bytes) != string(src.Bytes) {
				t.Fatal("data differs after WRITE and READ through an idle target")
			}
			t.Logf("%d MiB written and read back through an idle target in %v", n*2, time.Since(start))
		})
	}
}

// With a progress interval of a second, an idle tcp;ofi_rxm target still
// serves writes at once: it sleeps on the completion queue's wait
// descriptor, which the provider makes readable when data arrives.
func TestIdleTargetWakesOnData(t *testing.T) {
	h := harness(`{"provider":"tcp;ofi_rxm","domain":"lo","progress_interval":"1s"}`)
	a, b := transporttest.NewNode(t, h, "initiator"), transporttest.NewNode(t, h, "sleeping-target")
	src := a.Alloc(t, 1<<20, 0)
	dst := b.Alloc(t, 1<<20, 0)
	peer := a.Connect(t, b)
	a.MustTransfer(t, peer, []plugins.Op{{Kind: plugins.OpWrite, LocalRegion: src.ID, RemoteRegion: dst.ID, Length: 4096}}) // connects
	time.Sleep(1500 * time.Millisecond)                                                                                     // the target is asleep now
	start := time.Now()
	for i := 0; i < 20; i++ {
		a.MustTransfer(t, peer, []plugins.Op{{Kind: plugins.OpWrite, LocalRegion: src.ID, RemoteRegion: dst.ID, Length: 64 << 10}})
	}
	// Woken by its descriptor, the target serves each write at once.
	// Polled every second it could not take less than 19 s whatever the
	// machine's speed: each write after the first is sent right after the
	// tick that served the one before, so it waits a whole interval. The
	// bound leaves a loaded machine 15 s for 20 small writes.
	if d := time.Since(start); d > 15*time.Second {
		t.Fatalf("20 writes to a target with a 1s progress interval took %v: it did not wake on incoming data", d)
	} else {
		t.Logf("20 writes to a sleeping target in %v", d)
	}
}

// Idle transports must not spin: the progress threads of two of them
// (initiator and target) sleep in ppoll for the whole progress_interval
// (1 s here; 200 us is its sleep while ops are in flight), waiting on the
// provider's wait descriptor and the event fd. A state, read from /proc,
// not a CPU share, which depends on the machine.
func TestIdleDoesNotSpin(t *testing.T) {
	nr, ok := map[string]int{"amd64": 271, "arm64": 73}[runtime.GOARCH] // ppoll
	if !ok {
		t.Skipf("no ppoll syscall number for %s", runtime.GOARCH)
	}
	for _, p := range softProviders {
		t.Run(p.name, func(t *testing.T) {
			opts := strings.TrimSuffix(p.opts, "}") + `,"progress_interval":"1s"}`
			idlePair(t, opts)
			testbin.Eventually(t, "both progress threads to sleep in ppoll for progress_interval (1s)", func() bool {
				asleep := 0
				for _, th := range testbin.Blocked(t, os.Getpid()) {
					if th.Nr != nr || th.Args[2] == 0 {
						continue
					}
					ts, err := testbin.ReadMem(t, os.Getpid(), th.Args[2], 16) // struct timespec
					if err == nil && binary.NativeEndian.Uint64(ts) == 1 && binary.NativeEndian.Uint64(ts[8:]) == 0 {
						asleep++
					}
				}
				return asleep >= 2
			})
		})
	}
}

// idlePair is two nodes of the efa transport with opts after a 1 MiB
// write from the first to the second.
func idlePair(t *testing.T, opts string) {
	h := harness(opts)
	a, b := transporttest.NewNode(t, h, "a"), transporttest.NewNode(t, h, "b")
	src := a.Alloc(t, 1<<20, 0)
	dst := b.Alloc(t, 1<<20, 0)
	peer := a.Connect(t, b)
	a.MustTransfer(t, peer, []plugins.Op{{Kind: plugins.OpWrite, LocalRegion: src.ID, RemoteRegion: dst.ID, Length: 1 << 20}})
}

// Two ends must run the same provider; Connect says so instead of handing
// fi_av_insert an address of another format.
func TestProviderMismatch(t *testing.T) {
	a := transporttest.NewNode(t, harness(`{"provider":"tcp;ofi_rxm","domain":"lo"}`), "tcp-node")
	b := transporttest.NewNode(t, harness(`{"provider":"shm"}`), "shm-node")
	_, err := a.T.Connect(context.Background(), b.Info())
	if !errors.Is(err, plugins.ErrNotSupported) {
		t.Fatalf("Connect tcp;ofi_rxm -> shm: got %v, want ErrNotSupported", err)
	}
	t.Log(err)
	info := b.Info()
	info.Endpoint = []byte("not an endpoint")
	if _, err := b.T.Connect(context.Background(), info); !errors.Is(err, plugins.ErrInvalidArgument) {
		t.Fatalf("garbage endpoint: got %v, want ErrInvalidArgument", err)
	}
}

// A region's key is checked against what its peer published.
func TestBadRegionKeysRejected(t *testing.T) {
	h := harness(`{"provider":"tcp;ofi_rxm","domain":"lo"}`)
	a, b := transporttest.NewNode(t, h, "a"), transporttest.NewNode(t, h, "b")
	dst := b.Alloc(t, 4096, 0)
	for name, mutate := range map[string]func(*plugins.RemoteRegion){
		"truncated key": func(r *plugins.RemoteRegion) { r.Key = r.Key[:10] },
		"no key":        func(r *plugins.RemoteRegion) { r.Key = nil },
		"size mismatch": func(r *plugins.RemoteRegion) { r.Size *= 2 },
		"region id 0":   func(r *plugins.RemoteRegion) { r.ID = 0 },
	} {
		info := b.Info()
		mutate(&info.Regions[0])
		_, err := a.T.Connect(context.Background(), info)
		if !errors.Is(err, plugins.ErrProtocol) {
			t.Errorf("%s: got %v, want ErrProtocol", name, err)
		}
	}
	_ = dst
}

// Opening and closing transports (with regions, peers and transfers)
// leaves no file descriptors, threads or goroutines behind.
func TestNoLeaks(t *testing.T) {
	fds := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Skip("no /proc/self/fd")
		}
		return len(ents)
	}
	cycle := func(opts string) {
		t.Run("cycle", func(t *testing.T) {
			h := harness(opts)
			a, b := transporttest.NewNode(t, h, "a"), transporttest.NewNode(t, h, "b")
			src := a.Alloc(t, 1<<20, 0)
			dst := b.Alloc(t, 1<<20, 0)
			peer := a.Connect(t, b)
			a.MustTransfer(t, peer, []plugins.Op{{Kind: plugins.OpWrite, LocalRegion: src.ID, RemoteRegion: dst.ID, Length: 1 << 20}})
			if err := a.T.Disconnect(context.Background(), peer); err != nil {
				t.Fatal(err)
			}
			b.Free(t, dst)
		})
	}
	for _, p := range softProviders {
		cycle(p.opts) // libfabric's one-time setup
		time.Sleep(100 * time.Millisecond)
		fd0, g0 := fds(), runtime.NumGoroutine()
		const cycles = 5 // a leak of each cycle shows after the first
		for i := 0; i < cycles; i++ {
			cycle(p.opts)
		}
		deadline := time.Now().Add(testbin.WaitLimit)
		for time.Now().Before(deadline) && (fds() > fd0 || runtime.NumGoroutine() > g0) {
			time.Sleep(50 * time.Millisecond)
		}
		if fd1, g1 := fds(), runtime.NumGoroutine(); fd1 > fd0 || g1 > g0 {
			t.Errorf("%s: after %d open/transfer/close cycles: %d -> %d fds, %d -> %d goroutines", p.name, cycles, fd0, fd1, g0, g1)
		}
	}
}
