// Package shm allocates and maps shared-memory segments that the host and a
// transport plugin process both map: an anonymous memfd on Linux, passed to
// the plugin by file descriptor.
package shm

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"unsafe"
)

// ErrUnsupported is returned on platforms without shared-memory support.
var ErrUnsupported = errors.New("shm: shared memory regions are not supported on this platform")

// MaxSize bounds one segment (1 TiB) so a bad size cannot wrap arithmetic.
const MaxSize = 1 << 40

// MaxOffset bounds an offset into a shared-memory file: every user
// address (the arena of caller memory puts pages at their address).
const MaxOffset = 1 << 57

// ShmemHugeFile is where Linux says whether shared memory (memfds, tmpfs)
// may use transparent huge pages (ShmemHuge).
const ShmemHugeFile = "/sys/kernel/mm/transparent_hugepage/shmem_enabled"

// Segment is a shared-memory mapping and the file that backs it.
type Segment struct {
	mu   sync.Mutex
	file *os.File
	full []byte // the whole mapping (page aligned), for munmap
	mem  []byte // the part asked for
}

// Bytes returns the mapped memory. It is nil after Close.
func (s *Segment) Bytes() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mem
}

// File returns the file backing the segment (for passing its descriptor to
// another process). It is nil after Close.
func (s *Segment) File() *os.File {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.file
}

// Size is the segment's length in bytes.
func (s *Segment) Size() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.mem)
}

// Close unmaps the memory and closes the file. It is idempotent. No one may
// touch the memory after Close.
func (s *Segment) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	if s.full != nil {
		if err := unmap(s.full); err != nil {
			errs = append(errs, fmt.Errorf("shm: munmap: %w", err))
		}
		s.full, s.mem = nil, nil
	}
	if s.file != nil {
		if err := s.file.Close(); err != nil {
			errs = append(errs, fmt.Errorf("shm: close: %w", err))
		}
		s.file = nil
	}
	return errors.Join(errs...)
}

func checkSize(size int) error {
	if size <= 0 || size > MaxSize {
		return fmt.Errorf("shm: size %d out of range: must be between 1 and %d bytes", size, MaxSize)
	}
	return nil
}

func unsafePointer(b []byte) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(b)) }
