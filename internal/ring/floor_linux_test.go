//go:build linux

package ring

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The floor of a cross-process wake-up here: two processes ping-pong a
// counter through a word of shared memory, waiting for each other by a
// futex (sleep every time), by spinning, or spinning then sleeping as the
// rings do. One op is a round trip: two wake-ups, as a ring batch needs
// (the host wakes the plugin, the plugin wakes the host).
//
//	go test -run '^$' -bench CrossProcess -benchtime 2s ./internal/ring

const floorChildEnv = "KVCONNECT_RING_FLOOR_CHILD"

func TestMain(m *testing.M) {
	if mode := os.Getenv(floorChildEnv); mode != "" {
		switch {
		case mode == "echo":
			relayEcho()
		case strings.HasPrefix(mode, "relay-"):
			relayChild(mode)
		default:
			floorChild(mode)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// floorWords maps the two words of the ping-pong from fd.
func floorWords(fd int) (ping, pong *uint32, mem []byte) {
	mem, err := unix.Mmap(fd, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		panic(err)
	}
	return (*uint32)(unsafe.Pointer(&mem[0])), (*uint32)(unsafe.Pointer(&mem[64])), mem
}

// await waits for *w to differ from seen, per mode.
func await(mode string, w *uint32, seen uint32) uint32 {
	switch mode {
	case "futex":
		for {
			if v := atomic.LoadUint32(w); v != seen {
				return v
			}
			futexWait(w, seen, 0, Brief)
		}
	case "spin":
		for {
			if v := atomic.LoadUint32(w); v != seen {
				return v
			}
		}
	default: // spin 20 µs, then sleep
		deadline := time.Now().Add(20 * time.Microsecond)
		for i := 0; ; i++ {
			if v := atomic.LoadUint32(w); v != seen {
				return v
			}
			if i%16 == 0 && time.Now().After(deadline) {
				for {
					if v := atomic.LoadUint32(w); v != seen {
						return v
					}
					futexWait(w, seen, 0, Brief)
				}
			}
		}
	}
}

func floorChild(mode string) {
	runtime.LockOSThread()
	ping, pong, _ := floorWords(3)
	seen := uint32(0)
	for {
		seen = await(mode, ping, seen)
		if seen == ^uint32(0) {
			return
		}
		atomic.StoreUint32(pong, seen)
		futexWake(pong, 1)
	}
}

// floorMem is a page of shared memory for the words, closed with b.
func floorMem(b *testing.B) (int, *os.File) {
	fd, err := unix.MemfdCreate("floor", unix.MFD_CLOEXEC)
	if err != nil {
		b.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "floor")
	b.Cleanup(func() { f.Close() })
	if err := unix.Ftruncate(fd, 4096); err != nil {
		b.Fatal(err)
	}
	return fd, f
}

func BenchmarkCrossProcessWakeup(b *testing.B) {
	for _, mode := range []string{"futex", "spin", "spin-then-futex"} {
		b.Run(mode, func(b *testing.B) {
			fd, f := floorMem(b)
			ping, pong, mem := floorWords(fd)
			defer unix.Munmap(mem)
			child := startChild(b, mode, f)
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			b.ResetTimer()
			for i := 1; i <= b.N; i++ {
				atomic.StoreUint32(ping, uint32(i))
				futexWake(ping, 1)
				await(mode, pong, uint32(i-1))
			}
			b.StopTimer()
			atomic.StoreUint32(ping, ^uint32(0))
			futexWake(ping, 1)
			if err := child.Wait(); err != nil {
				b.Fatal(fmt.Errorf("child: %w", err))
			}
		})
	}
}

// BenchmarkInProcessChannel is the same round trip between two goroutines
// over channels, for comparison.
func BenchmarkInProcessChannel(b *testing.B) {
	ping, pong := make(chan int), make(chan int)
	go func() {
		for v := range ping {
			pong <- v
		}
	}()
	for i := 0; i < b.N; i++ {
		ping <- i
		<-pong
	}
	close(ping)
}
