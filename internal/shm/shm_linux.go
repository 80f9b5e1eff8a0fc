//go:build linux

package shm

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// New creates an anonymous shared-memory segment of size bytes (a memfd,
// so nothing is left in /dev/shm if the process dies) and maps it.
func New(name string, size int) (*Segment, error) {
	if err := checkSize(size); err != nil {
		return nil, err
	}
	fd, err := unix.MemfdCreate("kvconnect:"+name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("shm: memfd_create: %w", err)
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
	mem, err := mapFile(f, size)
	if err != nil {
		f.Close()
		return nil, err
	}
	return &Segment{file: f, full: mem, mem: mem}, nil
}

// Map maps size bytes at offset of an existing shared-memory file,
// typically received from another process. The segment takes ownership of
// f. The file must pass CheckShareable; offset needs no alignment.
func Map(f *os.File, offset uint64, size int) (*Segment, error) {
	if err := CheckShareable(f, offset, size); err != nil {
		return nil, err
	}
	page := uint64(unix.Getpagesize())
	start := offset &^ (page - 1)
	full, err := unix.Mmap(int(f.Fd()), int64(start), int(offset-start)+size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("shm: mmap %d bytes at offset %d: %w", size, offset, err)
	}
	head := offset - start
	return &Segment{file: f, full: full, mem: full[head : head+uint64(size) : head+uint64(size)]}, nil
}

func mapFile(f *os.File, size int) ([]byte, error) {
	mem, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("shm: mmap %d bytes: %w", size, err)
	}
	return mem, nil
}

func unmap(mem []byte) error { return unix.Munmap(mem) }
