package ucx

import "sync/atomic"

// mapped counts the memory registrations of this process's workers that
// were made (MemMap) and not yet undone (MemUnmap).
var mapped atomic.Int64

// Mapped is how many memory registrations this process made through this
// package and has not unmapped yet, across all workers: UCX keeps such
// memory registered (pinned, with RDMA lanes) until the process exits,
// whatever happens to the worker. A leak check: after every transport
// closed, it is back where it started.
func Mapped() int64 { return mapped.Load() }
