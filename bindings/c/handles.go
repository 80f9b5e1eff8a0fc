package main

import (
	"fmt"
	"sync"

	"github.com/kvconnect/kvconnect/connector"
	"github.com/kvconnect/kvconnect/internal/callermem"
)

// main is required of a c-shared package; the library has no program.
func main() {}

// engines is the handle table: kvc_engine values name engines here, so
// no Go pointer crosses to C. Guarded by enginesMu.
var (
	enginesMu  sync.RWMutex
	engines    = map[uint64]*engine{}
	nextEngine uint64
)

func newHandle() uint64 {
	enginesMu.Lock()
	defer enginesMu.Unlock()
	nextEngine++
	engines[nextEngine] = newEngine(nextEngine)
	return nextEngine
}

func lookup(h uint64) (*engine, error) {
	enginesMu.RLock()
	defer enginesMu.RUnlock()
	if e := engines[h]; e != nil {
		return e, nil
	}
	if h != 0 && h <= nextEngine {
		// Handles are never reused: this one named an engine since closed.
		return nil, codeErr(codeClosed, fmt.Errorf("kvconnect: engine handle %d: the engine was closed: %w", h, connector.ErrClosed))
	}
	return nil, codeErr(codeInvalidArgument, errUnknownEngine(h))
}

func dropHandle(h uint64) {
	enginesMu.Lock()
	defer enginesMu.Unlock()
	delete(engines, h)
}

// forkEntry is a mapping a forked child remaps privately.
type forkEntry struct {
	start, end uint64
	fd         int
	offset     uint64
}

// forkEntries lists what a forked child must make private: caller memory
// the arena backs and every engine's managed buffers.
func forkEntries() []forkEntry {
	var out []forkEntry
	fd, ranges := callermem.Held()
	for _, r := range ranges {
		out = append(out, forkEntry{start: r.Start, end: r.End, fd: fd, offset: r.Start})
	}
	enginesMu.RLock()
	defer enginesMu.RUnlock()
	for _, e := range engines {
		e.regMu.Lock()
		for _, r := range e.managed {
			out = append(out, managedEntry(r)...)
		}
		e.regMu.Unlock()
	}
	return out
}

func managedEntry(r *connector.Region) []forkEntry {
	f, off := r.Backing()
	if f == nil {
		return nil
	}
	const page = 4096
	start := r.Addr()
	if start%page != 0 || off%page != 0 {
		return nil // managed buffers are page aligned; anything else is left alone
	}
	end := (start + uint64(r.Len()) + page - 1) &^ (page - 1)
	return []forkEntry{{start: start, end: end, fd: int(f.Fd()), offset: off}}
}

func errUnknownEngine(h uint64) error {
	return fmt.Errorf("kvconnect: engine handle %d: no such engine (never created by kvc_engine_new): %w", h, connector.ErrInvalidArgument)
}
