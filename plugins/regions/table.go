// Package regions is the table of registered memory regions a transport
// keeps: lookups by id or absolute address, bounds checks on every access,
// and reference counts so a region is never unmapped under an op.
package regions

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/kvconnect/kvconnect/errdefs"
)

// Entry is one registered region.
type Entry struct {
	ID   uint64
	Addr uint64
	Mem  []byte

	mu      sync.Mutex
	refs    int
	closing bool
	drained chan struct{}
}

// Release ends an access started by Table.Resolve.
func (e *Entry) Release() {
	e.mu.Lock()
	e.refs--
	if e.closing && e.refs == 0 {
		close(e.drained)
	}
	e.mu.Unlock()
}

func (e *Entry) acquire() bool {
	e.mu.Lock()
	ok := !e.closing
	if ok {
		e.refs++
	}
	e.mu.Unlock()
	return ok
}

type snapshot struct {
	byID   map[uint64]*Entry
	byAddr []*Entry // sorted by Addr
}

// Table is a set of regions. Lookups are lock-free; changes copy the table.
type Table struct {
	mu       sync.Mutex // serialises writers
	snap     atomic.Pointer[snapshot]
	draining map[uint64]*Entry // removed, but an access may still hold them; guarded by mu
}

func (t *Table) load() *snapshot {
	if s := t.snap.Load(); s != nil {
		return s
	}
	return &snapshot{}
}

// Add registers a region. Ids must be non-zero and unique, address ranges
// must not overlap.
func (t *Table) Add(id, addr uint64, mem []byte) error {
	if id == 0 {
		return fmt.Errorf("regions: region id 0 is reserved: %w", errdefs.ErrInvalidArgument)
	}
	if len(mem) == 0 {
		return fmt.Errorf("regions: region %d is empty: %w", id, errdefs.ErrInvalidArgument)
	}
	if addr+uint64(len(mem)) < addr {
		return fmt.Errorf("regions: region %d at 0x%x+%d wraps the address space: %w", id, addr, len(mem), errdefs.ErrInvalidArgument)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	old := t.load()
	if _, ok := old.byID[id]; ok {
		return fmt.Errorf("regions: region %d already registered: %w", id, errdefs.ErrInvalidArgument)
	}
	e := &Entry{ID: id, Addr: addr, Mem: mem, drained: make(chan struct{})}
	end := addr + uint64(len(mem))
	for _, o := range old.byAddr {
		if addr < o.Addr+uint64(len(o.Mem)) && o.Addr < end {
			return fmt.Errorf("regions: region %d [0x%x, 0x%x) overlaps region %d [0x%x, 0x%x): %w",
				id, addr, end, o.ID, o.Addr, o.Addr+uint64(len(o.Mem)), errdefs.ErrInvalidArgument)
		}
	}
	next := &snapshot{byID: make(map[uint64]*Entry, len(old.byID)+1), byAddr: make([]*Entry, 0, len(old.byAddr)+1)}
	for k, v := range old.byID {
		next.byID[k] = v
	}
	next.byID[id] = e
	next.byAddr = append(append(next.byAddr, old.byAddr...), e)
	sort.Slice(next.byAddr, func(i, j int) bool { return next.byAddr[i].Addr < next.byAddr[j].Addr })
	t.snap.Store(next)
	return nil
}

// Remove unregisters a region and waits until no access holds it. If ctx
// ends first, the region is gone from lookups but may still be in use: the
// caller must not unmap it, and a later Remove of the same id waits again.
func (t *Table) Remove(ctx context.Context, id uint64) error {
	t.mu.Lock()
	if e, ok := t.draining[id]; ok {
		t.mu.Unlock()
		return t.finish(ctx, e)
	}
	old := t.load()
	e, ok := old.byID[id]
	if !ok {
		t.mu.Unlock()
		return fmt.Errorf("regions: region %d: %w", id, errdefs.ErrUnknownRegion)
	}
	next := &snapshot{byID: make(map[uint64]*Entry, len(old.byID)), byAddr: make([]*Entry, 0, len(old.byAddr))}
	for k, v := range old.byID {
		if k != id {
			next.byID[k] = v
		}
	}
	for _, v := range old.byAddr {
		if v.ID != id {
			next.byAddr = append(next.byAddr, v)
		}
	}
	t.snap.Store(next)
	if t.draining == nil {
		t.draining = map[uint64]*Entry{}
	}
	t.draining[id] = e
	t.mu.Unlock()
	return t.finish(ctx, e)
}

// finish waits for e's accesses to end and forgets it.
func (t *Table) finish(ctx context.Context, e *Entry) error {
	if err := e.close(ctx); err != nil {
		return err
	}
	t.mu.Lock()
	delete(t.draining, e.ID)
	t.mu.Unlock()
	return nil
}

func (e *Entry) close(ctx context.Context) error {
	e.mu.Lock()
	if !e.closing {
		e.closing = true
		if e.refs == 0 {
			close(e.drained)
		}
	}
	e.mu.Unlock()
	select {
	case <-e.drained:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("regions: waiting for ops on region %d to finish: %w", e.ID, errdefs.FromContext(ctx.Err()))
	}
}

// RemoveAll unregisters every region, waiting for accesses to end.
func (t *Table) RemoveAll(ctx context.Context) error {
	t.mu.Lock()
	old := t.load()
	t.snap.Store(&snapshot{})
	pending := append([]*Entry(nil), old.byAddr...)
	for _, e := range old.byAddr {
		if t.draining == nil {
			t.draining = map[uint64]*Entry{}
		}
		t.draining[e.ID] = e
	}
	for _, e := range t.draining {
		if _, ok := old.byID[e.ID]; !ok {
			pending = append(pending, e)
		}
	}
	t.mu.Unlock()
	var first error
	for _, e := range pending {
		if err := t.finish(ctx, e); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Len is the number of registered regions.
func (t *Table) Len() int { return len(t.load().byID) }

// Resolve bounds-checks [offset, offset+length) in region id (or, when id is
// 0, the absolute range [offset, offset+length) in any region) and returns
// the region, acquired, with the memory of that range. The caller must call
// Release on the entry when done with the memory.
func (t *Table) Resolve(id, offset, length uint64) (*Entry, []byte, error) {
	s := t.load()
	var e *Entry
	if id != 0 {
		e = s.byID[id]
		if e == nil {
			return nil, nil, fmt.Errorf("region %d: %w", id, errdefs.ErrUnknownRegion)
		}
	} else {
		// Last region whose base is <= offset.
		i := sort.Search(len(s.byAddr), func(i int) bool { return s.byAddr[i].Addr > offset }) - 1
		if i < 0 || offset-s.byAddr[i].Addr >= uint64(len(s.byAddr[i].Mem)) {
			return nil, nil, fmt.Errorf("address 0x%x: %w", offset, errdefs.ErrUnknownRegion)
		}
		e = s.byAddr[i]
		offset -= e.Addr
	}
	size := uint64(len(e.Mem))
	if length > size || offset > size-length {
		return nil, nil, fmt.Errorf("region %d: range [%d, %d+%d) outside its %d bytes: %w", e.ID, offset, offset, length, size, errdefs.ErrOutOfBounds)
	}
	if !e.acquire() {
		return nil, nil, fmt.Errorf("region %d is being deregistered: %w", e.ID, errdefs.ErrUnknownRegion)
	}
	return e, e.Mem[offset : offset+length : offset+length], nil
}
