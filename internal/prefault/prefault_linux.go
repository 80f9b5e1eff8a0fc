//go:build linux

package prefault

import (
	"context"
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// batch is how many pages one pwritev(2) reads: IOV_MAX.
const batch = 1024

// ForKernel reads one byte of every page mem overlaps from kernel mode,
// by writing them with pwritev(2) into a one-page scratch memfd, so the
// kernel's later copies to and from mem do not take their first fault on
// each page in the middle of a transfer. It only reads: mem's contents
// are unchanged, whoever writes them meanwhile. It returns how many pages
// were read. It stops early, returning ctx's error, when ctx ends
// between two batches of pages, and at the first page the kernel cannot
// read (EFAULT: mem is not all mapped), returning an error that names
// its offset. Pages left unread only pay the cost on first use, so a
// caller may ignore the error. Safe for concurrent use.
func ForKernel(ctx context.Context, mem []byte) (int, error) {
	if len(mem) == 0 {
		return 0, nil
	}
	fd, err := unix.MemfdCreate("kvconnect:prefault", unix.MFD_CLOEXEC)
	if err != nil {
		return 0, fmt.Errorf("prefault: memfd_create: %w", err)
	}
	defer unix.Close(fd)
	page := uintptr(unix.Getpagesize())
	// The first byte of mem, then the first byte of every page after.
	next := int(page - uintptr(unsafe.Pointer(&mem[0]))%page)
	iov := make([][]byte, 0, batch)
	offs := make([]int, 0, batch)
	pages := 0
	for off := 0; off < len(mem); {
		if err := ctx.Err(); err != nil {
			return pages, err
		}
		iov, offs = iov[:0], offs[:0]
		for ; off < len(mem) && len(iov) < batch; off = nextPage(off, next, int(page)) {
			iov = append(iov, mem[off:off+1])
			offs = append(offs, off)
		}
		n, err := pwritevFull(fd, iov)
		pages += n
		if err != nil {
			return pages, fmt.Errorf("prefault: page at offset %d of %d bytes: %w", offs[n], len(mem), err)
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
