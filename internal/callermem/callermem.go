// Package callermem makes memory a caller already owns (any mapped,
// writable range of this process: a Go slice, a C buffer, a Python
// bytearray or numpy array) reachable by a transport plugin process, so
// that it can be registered like shared memory without moving it.
//
// Memory that is already a mapping of a shareable file (a memfd, a file
// on tmpfs or hugetlbfs, a MAP_SHARED|MAP_ANONYMOUS mapping) is reached
// through that file. Private memory (the heap, anonymous mmaps) is moved,
// in place, into one process-wide shared-memory file, the arena: its pages
// are copied into the arena at the file offset equal to their address and
// the arena is mapped over them (mmap MAP_FIXED), so the caller's
// addresses, contents and protection stay as they were while a plugin maps
// the same pages. Releasing the last lease on a page moves it back into
// private memory (mremap of a private copy over it) and frees the arena's
// page.
//
// What the caller must know (docs/PYTHON.md and the connector's
// RegisterMemory say it to users):
//   - Pages are the unit. The first and last page of a range may hold
//     other data (heap neighbours); their bytes are copied too, and a write
//     to those bytes by another thread in the instant between the copy and
//     the remap would be lost. Register ranges that no other thread writes
//     around during the call, or whole pages.
//   - While shared, the pages stay shared across fork(): a child forked
//     after Share would write into the parent's memory. Bindings that run
//     in forking processes remap held ranges privately in the child
//     (Held lists them; the C library does it in a pthread_atfork handler).
//   - Memory of a MAP_SHARED file mapping on disk, a stack, hugetlb
//     mappings and kernel pages cannot be shared and are refused.
//
// Share and Release are safe for concurrent use; they serialize on one
// process-wide lock.
package callermem

import (
	"errors"
	"fmt"
	"os"

	"github.com/kvconnect/kvconnect/errdefs"
)

// ErrUnsupported is returned on platforms without the mechanism (Linux
// only).
var ErrUnsupported = errors.New("callermem: sharing caller memory with plugins needs Linux")

// Lease is caller memory made reachable through a file: the bytes of the
// shared range are File's bytes at [Offset, Offset+length). A Lease is
// released once; its methods are safe for concurrent use.
type Lease struct {
	// File backs the memory; a plugin maps it. It belongs to the lease:
	// holders must not close it.
	File *os.File
	// Offset is where the memory's first byte lies in File.
	Offset uint64
	// How says how the memory was reached, for logs and errors:
	// "arena" (private pages moved into the arena) or "file" (the
	// mapping's own shareable file).
	How string

	release func() error
	done    bool
}

// Range is a run of this process's pages [Start, End) that the arena
// backs at file offset Start, for fork handlers (see Held).
type Range struct{ Start, End uint64 }

// errInvalid wraps errdefs.ErrInvalidArgument with the package's prefix.
func errInvalid(format string, args ...any) error {
	return wrapf(errdefs.ErrInvalidArgument, format, args...)
}

// wrapf formats a "callermem: ..." error wrapping sentinel.
func wrapf(sentinel error, format string, args ...any) error {
	return fmt.Errorf("callermem: %s: %w", fmt.Sprintf(format, args...), sentinel)
}
