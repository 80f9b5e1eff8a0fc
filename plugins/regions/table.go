package regions

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/google/btree"

	"github.com/kvconnect/kvconnect/errdefs"
)

// Entry is one registered region of a Table.
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

func (e *Entry) span() Span { return Span{ID: e.ID, Addr: e.Addr, Size: uint64(len(e.Mem))} }

// snapshot is an immutable view of a Table: two B-trees, by id and by
// address, that writers clone (copy-on-write, O(log n) per change) and
// readers use without a lock.
type snapshot struct {
	byID   *btree.BTreeG[*Entry]
	byAddr *btree.BTreeG[*Entry]
}

func lessID(a, b *Entry) bool   { return a.ID < b.ID }
func lessAddr(a, b *Entry) bool { return a.Addr < b.Addr }

var emptySnapshot = &snapshot{byID: btree.NewG(32, lessID), byAddr: btree.NewG(32, lessAddr)}

// Table is the set of regions a memory owner registered. Lookups take no
// lock; Add and Remove cost O(log n), so a node may register hundreds of
// thousands of regions. The zero value is an empty table.
type Table struct {
	mu       sync.Mutex // serialises writers
	snap     atomic.Pointer[snapshot]
	draining map[uint64]*Entry // removed, but an access may still hold them; guarded by mu
}

func (t *Table) load() *snapshot {
	if s := t.snap.Load(); s != nil {
		return s
	}
	return emptySnapshot
}

// containing returns the region whose range holds addr, if any.
func (s *snapshot) containing(addr uint64) *Entry {
	var found *Entry
	s.byAddr.DescendLessOrEqual(&Entry{Addr: addr}, func(e *Entry) bool {
		found = e
		return false
	})
	if found == nil || addr-found.Addr >= uint64(len(found.Mem)) {
		return nil
	}
	return found
}

// Add registers a region. Ids must be non-zero and unique (also against a
// region whose Remove has not finished), address ranges must not
// overlap; errors wrap errdefs.ErrInvalidArgument.
func (t *Table) Add(id, addr uint64, mem []byte) error {
	e := &Entry{ID: id, Addr: addr, Mem: mem, drained: make(chan struct{})}
	if err := checkSpan(e.span()); err != nil {
		return fmt.Errorf("regions: %w", err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	old := t.load()
	if _, dup := old.byID.Get(e); dup {
		return fmt.Errorf("regions: region %d already registered: %w", id, errdefs.ErrInvalidArgument)
	}
	if _, draining := t.draining[id]; draining {
		// A Remove gave up waiting for its accesses: the id is not free
		// until a Remove finishes (Remove of the id waits for the old one).
		return fmt.Errorf("regions: region %d is still being removed (ops on it have not ended): %w", id, errdefs.ErrInvalidArgument)
	}
	if o := old.containing(addr); o != nil {
		return fmt.Errorf("regions: %w", overlapError(e.span(), o.span()))
	}
	var next *Entry
	old.byAddr.AscendGreaterOrEqual(e, func(o *Entry) bool { next = o; return false })
	if next != nil && next.Addr < e.span().End() {
		return fmt.Errorf("regions: %w", overlapError(e.span(), next.span()))
	}
	s := &snapshot{byID: old.byID.Clone(), byAddr: old.byAddr.Clone()}
	s.byID.ReplaceOrInsert(e)
	s.byAddr.ReplaceOrInsert(e)
	t.snap.Store(s)
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
	e, ok := old.byID.Get(&Entry{ID: id})
	if !ok {
		t.mu.Unlock()
		return fmt.Errorf("regions: region %d: %w", id, errdefs.ErrUnknownRegion)
	}
	s := &snapshot{byID: old.byID.Clone(), byAddr: old.byAddr.Clone()}
	s.byID.Delete(e)
	s.byAddr.Delete(e)
	t.snap.Store(s)
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
	t.snap.Store(emptySnapshot)
	if t.draining == nil {
		t.draining = map[uint64]*Entry{}
	}
	old.byID.Ascend(func(e *Entry) bool {
		t.draining[e.ID] = e
		return true
	})
	pending := make([]*Entry, 0, len(t.draining))
	for _, e := range t.draining {
		pending = append(pending, e)
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
func (t *Table) Len() int { return t.load().byID.Len() }

// idKeys are the keys Resolve looks regions up by: a key made per call
// escapes to the heap (the tree compares through a function value), an
// allocation per op on the data path.
var idKeys = sync.Pool{New: func() any { return new(Entry) }}

// Resolve bounds-checks [offset, offset+length) in region id (or, when id
// is 0, the absolute range [offset, offset+length) in any region) and
// returns the region, acquired, with the memory of that range. The caller
// must call Release on the entry when done with the memory. An unknown id
// or address, or a region being removed, wraps errdefs.ErrUnknownRegion; a
// range that does not fit wraps errdefs.ErrOutOfBounds.
func (t *Table) Resolve(id, offset, length uint64) (*Entry, []byte, error) {
	s := t.load()
	var e *Entry
	if id != 0 {
		var ok bool
		k := idKeys.Get().(*Entry)
		k.ID = id
		e, ok = s.byID.Get(k)
		idKeys.Put(k)
		if !ok {
			return nil, nil, fmt.Errorf("region %d: %w", id, errdefs.ErrUnknownRegion)
		}
	} else {
		if e = s.containing(offset); e == nil {
			return nil, nil, fmt.Errorf("address 0x%x: %w", offset, errdefs.ErrUnknownRegion)
		}
		offset -= e.Addr
	}
	if err := Check(e.ID, uint64(len(e.Mem)), offset, length); err != nil {
		return nil, nil, err
	}
	if !e.acquire() {
		return nil, nil, fmt.Errorf("region %d is being deregistered: %w", e.ID, errdefs.ErrUnknownRegion)
	}
	return e, e.Mem[offset : offset+length : offset+length], nil
}
