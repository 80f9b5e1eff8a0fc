//go:build linux

package prefault_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/kvconnect/kvconnect/internal/prefault"
)

// anon maps n pages of anonymous memory without touching them.
func anon(t *testing.T, n int) []byte {
	t.Helper()
	m, err := unix.Mmap(-1, 0, n*unix.Getpagesize(), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(m) })
	return m
}

// resident counts the pages of m (page aligned) that have a page table
// entry (mincore(2)): an untouched anonymous page has none until an
// access, from user or kernel mode, faults it in.
func resident(t *testing.T, m []byte) int {
	t.Helper()
	vec := make([]byte, len(m)/unix.Getpagesize())
	if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		t.Fatal(e)
	}
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return n
}

func TestForKernelReadsEveryPage(t *testing.T) {
	page := unix.Getpagesize()
	for _, tc := range []struct {
		name       string
		pages      int
		head, tail int // bytes of the mapping left out of mem at each end
		want       int // pages ForKernel reads
	}{
		{"one page", 1, 0, 0, 1},
		{"aligned, two batches and a part", 2500, 0, 0, 2500},
		{"exactly one batch", 1024, 0, 0, 1024},
		{"unaligned ends", 40, 100, 100, 40},
		{"one byte in each end page", 3, page - 1, page - 1, 3},
		{"inside one page", 1, 10, 10, 1},
		{"large enough to read in parts", 2*16384 + 300, 5, 7, 2*16384 + 300},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := anon(t, tc.pages)
			if n := resident(t, m); n != 0 {
				t.Fatalf("%d pages resident before", n)
			}
			mem := m[tc.head : len(m)-tc.tail]
			n, err := prefault.ForKernel(context.Background(), mem)
			if err != nil {
				t.Fatal(err)
			}
			if n != tc.want {
				t.Errorf("ForKernel read %d pages, want %d", n, tc.want)
			}
			if got := resident(t, m); got != tc.pages {
				t.Errorf("%d of %d pages resident after ForKernel", got, tc.pages)
			}
		})
	}
}

func TestForKernelEmpty(t *testing.T) {
	if n, err := prefault.ForKernel(context.Background(), nil); n != 0 || err != nil {
		t.Fatalf("ForKernel(nil) = %d, %v", n, err)
	}
}

// ForKernel only reads: a region's contents, written meanwhile by its
// owner, are what the owner wrote.
func TestForKernelKeepsContents(t *testing.T) {
	page := unix.Getpagesize()
	m := anon(t, 3000)
	for i := range m {
		m[i] = byte(i * 7)
	}
	want := bytes.Clone(m)
	var wg sync.WaitGroup
	start := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		<-start
		for i := 0; i < len(m); i += page {
			m[i] = byte(i/page) + 1 // the byte ForKernel reads
			want[i] = m[i]
		}
	}()
	close(start)
	if _, err := prefault.ForKernel(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if !bytes.Equal(m, want) {
		t.Fatal("ForKernel changed the memory it read")
	}
}

// A page the kernel cannot read ends the pass with EFAULT, naming its
// offset, after the pages before it; nothing crashes.
func TestForKernelStopsAtAHole(t *testing.T) {
	page := unix.Getpagesize()
	m := anon(t, 8)
	if _, _, e := unix.Syscall(unix.SYS_MUNMAP, uintptr(unsafe.Pointer(&m[5*page])), uintptr(page), 0); e != 0 {
		t.Fatal(e)
	}
	n, err := prefault.ForKernel(context.Background(), m)
	if !errors.Is(err, unix.EFAULT) {
		t.Fatalf("err = %v, want EFAULT", err)
	}
	if n != 5 {
		t.Errorf("read %d pages before the hole, want 5", n)
	}
	if got := resident(t, m[:5*page]); got != 5 {
		t.Errorf("%d of the 5 pages before the hole resident", got)
	}
}

func TestForKernelCanceled(t *testing.T) {
	m := anon(t, 4)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	n, err := prefault.ForKernel(ctx, m)
	if !errors.Is(err, context.Canceled) || n != 0 {
		t.Fatalf("ForKernel with a canceled context = %d, %v", n, err)
	}
	if got := resident(t, m); got != 0 {
		t.Errorf("%d pages read after cancel", got)
	}
}

// A hole in memory read in parts ends its own part; the error names the
// hole's offset, and the other parts are read.
func TestForKernelHoleInParts(t *testing.T) {
	page := unix.Getpagesize()
	const pages = 2*16384 + 8
	m := anon(t, pages)
	if _, _, e := unix.Syscall(unix.SYS_MUNMAP, uintptr(unsafe.Pointer(&m[100*page])), uintptr(page), 0); e != 0 {
		t.Fatal(e)
	}
	n, err := prefault.ForKernel(context.Background(), m)
	if !errors.Is(err, unix.EFAULT) || !strings.Contains(err.Error(), fmt.Sprintf("offset %d:", 100*page)) {
		t.Fatalf("err = %v, want EFAULT at offset %d", err, 100*page)
	}
	if n < 100 {
		t.Errorf("read %d pages, want at least the 100 before the hole", n)
	}
	if runtime.GOMAXPROCS(0) >= 2 {
		// The last part begins past the hole's part.
		if got := resident(t, m[len(m)-page:]); got != 1 {
			t.Errorf("the last page was not read: the parts after the hole's did not run")
		}
	}
}
