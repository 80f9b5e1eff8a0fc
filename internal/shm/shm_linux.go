//go:build linux

package shm

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/kvconnect/kvconnect/internal/fdlimit"
)

// New creates an anonymous shared-memory segment of size bytes (a memfd,
// so nothing is left in /dev/shm if the process dies) and maps it, every
// page faulted in, in huge pages where the machine allows
// (huge_linux.go).
func New(name string, size int) (*Segment, error) { return create(name, size, true) }

// NewLazy is New without faulting the pages in: for a segment handed out
// in pieces (a slab), whose pages are faulted in piece by piece.
func NewLazy(name string, size int) (*Segment, error) { return create(name, size, false) }

func create(name string, size int, populate bool) (*Segment, error) {
	if err := checkSize(size); err != nil {
		return nil, err
	}
	fd, err := unix.MemfdCreate("kvconnect:"+name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("shm: memfd_create: %w", fdlimit.Explain(err))
	}
	f := os.NewFile(uintptr(fd), "memfd:kvconnect:"+name)
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		f.Close()
		return nil, fmt.Errorf("shm: ftruncate %d bytes: %w", size, err)
	}
	// Seal the size: a plugin holding the descriptor cannot shrink the file
	// under the host's mapping (which would SIGBUS the host).
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL); err != nil {
		f.Close()
		return nil, fmt.Errorf("shm: sealing the segment's size: %w", err)
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("shm: mmap %d bytes: %w", size, fdlimit.ExplainMmap(err))
	}
	if populate {
		// Huge pages are asked for before the first fault picks the
		// pages' size (huge_linux.go).
		AdviseHuge(mem)
		switch err := populateWrite(mem); {
		case errors.Is(err, unix.EINVAL):
			// A kernel before 5.14: touch every page. The file is new,
			// so writing a zero changes nothing.
			for i := 0; i < len(mem); i += unix.Getpagesize() {
				mem[i] = 0
			}
		case err != nil:
			unix.Munmap(mem)
			f.Close()
			return nil, fmt.Errorf("shm: faulting in %d bytes: %w (is memory short?)", size, err)
		}
	}
	return &Segment{file: f, full: mem, mem: mem}, nil
}

// Map maps size bytes at offset of an existing shared-memory file,
// typically received from another process, every page faulted in (huge
// pages asked for first, as New does). The
// segment takes ownership of f. The file must pass CheckShareable; offset
// needs no alignment.
func Map(f *os.File, offset uint64, size int) (*Segment, error) {
	if err := CheckShareable(f, offset, size); err != nil {
		return nil, err
	}
	start, length := mapRange(f, offset, size)
	full, err := unix.Mmap(int(f.Fd()), int64(start), length, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("shm: mmap %d bytes at offset %d: %w", size, offset, fdlimit.ExplainMmap(err))
	}
	AdviseHuge(full)
	switch err := populateWrite(full); {
	case errors.Is(err, unix.EINVAL):
		// A kernel before 5.14: map again, populated by mmap itself.
		unix.Munmap(full)
		if full, err = unix.Mmap(int(f.Fd()), int64(start), length, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE); err != nil {
			return nil, fmt.Errorf("shm: mmap %d bytes at offset %d: %w", size, offset, fdlimit.ExplainMmap(err))
		}
	case err != nil:
		unix.Munmap(full)
		return nil, fmt.Errorf("shm: faulting in %d bytes at offset %d: %w (is memory short?)", size, offset, err)
	}
	head := offset - start
	return &Segment{file: f, full: full, mem: full[head : head+uint64(size) : head+uint64(size)]}, nil
}

// MapView maps the first size bytes of a shared-memory file (a view that
// many regions share) without faulting its pages in: regions fault in
// their own ranges (Populate). The segment takes ownership of f. The file
// must pass CheckShareable for [0, size).
func MapView(f *os.File, size int) (*Segment, error) { return MapViewAt(f, 0, size) }

// MapViewAt is MapView of [offset, offset+size) of the file; offset must
// be a page multiple.
func MapViewAt(f *os.File, offset uint64, size int) (*Segment, error) {
	if err := CheckShareable(f, offset, size); err != nil {
		return nil, err
	}
	if offset%uint64(unix.Getpagesize()) != 0 {
		return nil, fmt.Errorf("shm: view of %s at offset %d: not a page multiple", f.Name(), offset)
	}
	start, length := mapRange(f, offset, size)
	full, err := unix.Mmap(int(f.Fd()), int64(start), length, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("shm: mmap %d bytes at offset %d of %s: %w", size, offset, f.Name(), fdlimit.ExplainMmap(err))
	}
	AdviseHuge(full) // before Populate faults the regions' ranges in
	head := offset - start
	return &Segment{file: f, full: full, mem: full[head : head+uint64(size) : head+uint64(size)]}, nil
}

// mapRange is what to map of f for [offset, offset+size): from offset
// rounded down to f's page, for length bytes. A file on hugetlbfs maps
// in its huge pages (mmap refuses an offset inside one, and munmap a
// length that is not a multiple of one: the mapping would stay), so
// there both ends are rounded to the huge page.
func mapRange(f *os.File, offset uint64, size int) (start uint64, length int) {
	unit := uint64(unix.Getpagesize())
	var sfs unix.Statfs_t
	huge := unix.Fstatfs(int(f.Fd()), &sfs) == nil && int64(sfs.Type) == unix.HUGETLBFS_MAGIC && uint64(sfs.Bsize) > unit
	if huge {
		unit = uint64(sfs.Bsize)
	}
	start = offset &^ (unit - 1)
	end := offset + uint64(size)
	if huge {
		end = (end + unit - 1) &^ (unit - 1)
	}
	return start, int(end - start)
}

// Populate faults in the pages of mem (part of a shared mapping) for
// writing, as MAP_POPULATE would have, so the first ops on a region do not
// pay for page faults. Kernels before 5.14 lack MADV_POPULATE_WRITE: then
// nothing happens. An error means some page cannot be backed (a sparse
// file on a full tmpfs, memory short, a range past the file's end): the
// first access there would kill the process with SIGBUS, so the caller
// refuses the memory.
func Populate(mem []byte) error {
	if len(mem) == 0 {
		return nil
	}
	page := uintptr(unix.Getpagesize())
	start := uintptr(unsafePointer(mem)) &^ (page - 1)
	end := uintptr(unsafePointer(mem)) + uintptr(len(mem))
	_, _, errno := unix.Syscall(unix.SYS_MADVISE, start, end-start, unix.MADV_POPULATE_WRITE)
	switch errno {
	case 0, unix.EINVAL: // done, or a kernel without MADV_POPULATE_WRITE
		return nil
	}
	return fmt.Errorf("shm: faulting in %d bytes: %w (a file on a full tmpfs such as /dev/shm, or memory short?)", len(mem), errno)
}

// Punch releases the pages of [off, off+size) of f back to the system;
// they read as zeros afterwards. off and size must be page aligned.
func Punch(f *os.File, off, size uint64) error {
	if err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, int64(off), int64(size)); err != nil {
		return fmt.Errorf("shm: releasing %d bytes at offset %d of %s: %w", size, off, f.Name(), err)
	}
	return nil
}

// PageSize is the system's page size.
func PageSize() int { return unix.Getpagesize() }

func unmap(mem []byte) error { return unix.Munmap(mem) }
