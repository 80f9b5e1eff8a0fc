//go:build linux

package prefault

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// batch is how many pages one pwritev(2) reads: IOV_MAX.
const batch = 1024

// minPartPages is the fewest pages a thread of its own is worth: memory
// under twice this is read by one thread.
const minPartPages = 16384

// ForKernel reads one byte of every page mem overlaps from kernel mode,
// by writing them with pwritev(2) into a one-page scratch memfd, so the
// kernel's later copies to and from mem do not take their first fault on
// each page in the middle of a transfer. It only reads: mem's contents
// are unchanged, whoever writes them meanwhile. Memory of many pages is
// read in parts, one per processor (GOMAXPROCS), at the same time: the
// faults it takes are paid per page, and two vCPUs took them in half the
// time of one. It returns how many pages were read. A part stops early
// when ctx ends between two batches of its pages (ForKernel then returns
// ctx's error), and at the first page the kernel cannot read (EFAULT:
// mem is not all mapped; the error names the lowest such offset). Pages
// left unread only pay the cost on first use, so a caller may ignore
// the error. ForKernel returns only when every part has; it is safe for
// concurrent use.
func ForKernel(ctx context.Context, mem []byte) (int, error) {
	if len(mem) == 0 {
		return 0, nil
	}
	page := unix.Getpagesize()
	cuts := split(len(mem), firstBoundary(mem, page), page, runtime.GOMAXPROCS(0))
	if len(cuts) == 2 {
		return readPages(ctx, mem, 0, page)
	}
	type result struct {
		n   int
		err error
	}
	res := make([]result, len(cuts)-1)
	var wg sync.WaitGroup
	for i := range res {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[i].n, res[i].err = readPages(ctx, mem[cuts[i]:cuts[i+1]], cuts[i], page)
		}()
	}
	wg.Wait()
	pages := 0
	var first error
	for _, r := range res {
		pages += r.n
		if first == nil && r.err != nil {
			first = r.err
		}
	}
	if err := ctx.Err(); err != nil && first != nil {
		return pages, err
	}
	return pages, first
}

// firstBoundary is the offset in mem of the first page boundary after
// mem[0] (len(mem) or more when there is none).
func firstBoundary(mem []byte, page int) int {
	return page - int(uintptr(unsafe.Pointer(&mem[0]))%uintptr(page))
}

// split cuts n bytes, whose first page boundary is at offset first, into
// up to procs parts of nearly equal numbers of pages, cut at page
// boundaries, and into more than one only when each gets about
// minPartPages pages or more. It returns the cuts: part i is [cuts[i],
// cuts[i+1]).
func split(n, first, page, procs int) []int {
	pages := 1 // the page holding byte 0
	if first < n {
		pages += (n - first + page - 1) / page
	}
	parts := min(procs, pages/minPartPages)
	if parts < 2 {
		return []int{0, n}
	}
	per := (pages + parts - 1) / parts
	cuts := []int{0}
	for i := 1; i < parts; i++ {
		// Page index k >= 1 starts at first + (k-1)*page.
		cuts = append(cuts, min(first+(i*per-1)*page, n))
	}
	return append(cuts, n)
}

// readPages reads a byte of every page mem overlaps (mem starts at
// offset base of the memory ForKernel was given, for errors).
func readPages(ctx context.Context, mem []byte, base, page int) (int, error) {
	if len(mem) == 0 {
		return 0, nil
	}
	fd, err := unix.MemfdCreate("kvconnect:prefault", unix.MFD_CLOEXEC)
	if err != nil {
		return 0, fmt.Errorf("prefault: memfd_create: %w", err)
	}
	defer unix.Close(fd)
	// The first byte of mem, then the first byte of every page after.
	next := firstBoundary(mem, page)
	iov := make([][]byte, 0, batch)
	offs := make([]int, 0, batch)
	pages := 0
	for off := 0; off < len(mem); {
		if err := ctx.Err(); err != nil {
			return pages, err
		}
		iov, offs = iov[:0], offs[:0]
		for ; off < len(mem) && len(iov) < batch; off = nextPage(off, next, page) {
			iov = append(iov, mem[off:off+1])
			offs = append(offs, off)
		}
		n, err := pwritevFull(fd, iov)
		pages += n
		if err != nil {
			return pages, fmt.Errorf("prefault: page at offset %d: %w", base+offs[n], err)
		}
	}
	return pages, nil
}

// nextPage is the offset of the first byte of the page after the one
// holding off: next is the first page boundary past mem[0].
func nextPage(off, next, page int) int {
	if off < next {
		return next
	}
	return off + page
}

// pwritevFull writes iov (one byte each) at offset 0 of fd, going on
// after a short write, and returns how many bytes were written before an
// error.
func pwritevFull(fd int, iov [][]byte) (int, error) {
	done := 0
	for done < len(iov) {
		n, err := unix.Pwritev(fd, iov[done:], 0)
		if n > 0 {
			done += n
		}
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return done, err
		case n == 0:
			return done, unix.EFAULT
		}
	}
	return done, nil
}
