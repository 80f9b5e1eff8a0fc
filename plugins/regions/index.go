// Package regions is the bounds check every kvconnect transport and the
// connector share: "find the region an op names, by id or by absolute
// address, and check that its range lies inside", written once.
//
// Table is a memory owner's set of registered regions, with reference
// counts so that a region is never unmapped while an op uses it: a
// transport resolves every incoming op through it before touching memory
// (the owner's duty the Transport contract states). Index is an immutable
// lookup over any list of regions, such as the regions a peer published.
// Both are safe for concurrent use.
package regions

import (
	"fmt"
	"sort"

	"github.com/kvconnect/kvconnect/errdefs"
)

// Span is a region's id, base address and size.
type Span struct {
	ID   uint64
	Addr uint64
	Size uint64
}

// End is the first address past the span.
func (s Span) End() uint64 { return s.Addr + s.Size }

// Check bounds-checks [off, off+n) within a region of size bytes, without
// overflow; the error wraps errdefs.ErrOutOfBounds.
func Check(id, size, off, n uint64) error {
	if n > size || off > size-n {
		return fmt.Errorf("region %d: range [%d, %d+%d) outside its %d bytes: %w", id, off, off, n, size, errdefs.ErrOutOfBounds)
	}
	return nil
}

// checkSpan checks that s can be a region: a non-zero id and size, and a
// range that does not wrap the address space.
func checkSpan(s Span) error {
	switch {
	case s.ID == 0:
		return fmt.Errorf("region id 0 is reserved: %w", errdefs.ErrInvalidArgument)
	case s.Size == 0:
		return fmt.Errorf("region %d is empty: %w", s.ID, errdefs.ErrInvalidArgument)
	case s.End() < s.Addr:
		return fmt.Errorf("region %d at 0x%x+%d wraps the address space: %w", s.ID, s.Addr, s.Size, errdefs.ErrInvalidArgument)
	}
	return nil
}

func overlapError(a, b Span) error {
	return fmt.Errorf("region %d [0x%x, 0x%x) overlaps region %d [0x%x, 0x%x): %w: %w",
		a.ID, a.Addr, a.End(), b.ID, b.Addr, b.End(), errdefs.ErrAddressOverlap, errdefs.ErrInvalidArgument)
}

// Index is an immutable lookup over a list of regions, each carrying a
// value of type T (a peer's published region with its key, say).
type Index[T any] struct {
	byID   map[uint64]int
	sorted []indexed[T] // by address
}

type indexed[T any] struct {
	span Span
	v    T
}

// NewIndex builds an Index over items, whose spans span returns. It
// refuses (wrapping errdefs.ErrInvalidArgument) an id 0, an empty or
// wrapping region, a duplicate id and overlapping regions: a caller
// indexing what a peer sent should report that as the peer's protocol
// error.
func NewIndex[T any](items []T, span func(T) Span) (*Index[T], error) {
	x := &Index[T]{byID: make(map[uint64]int, len(items)), sorted: make([]indexed[T], 0, len(items))}
	for _, it := range items {
		s := span(it)
		if err := checkSpan(s); err != nil {
			return nil, err
		}
		x.sorted = append(x.sorted, indexed[T]{span: s, v: it})
	}
	sort.Slice(x.sorted, func(i, j int) bool { return x.sorted[i].span.Addr < x.sorted[j].span.Addr })
	for i, it := range x.sorted {
		if _, dup := x.byID[it.span.ID]; dup {
			return nil, fmt.Errorf("region %d listed twice: %w", it.span.ID, errdefs.ErrInvalidArgument)
		}
		x.byID[it.span.ID] = i
		if i > 0 && x.sorted[i-1].span.End() > it.span.Addr {
			return nil, overlapError(x.sorted[i-1].span, it.span)
		}
	}
	return x, nil
}

// Len is the number of regions.
func (x *Index[T]) Len() int { return len(x.sorted) }

// Lookup returns the value of region id.
func (x *Index[T]) Lookup(id uint64) (T, bool) {
	i, ok := x.byID[id]
	if !ok {
		var zero T
		return zero, false
	}
	return x.sorted[i].v, true
}

// Values lists the values in address order.
func (x *Index[T]) Values() []T {
	out := make([]T, len(x.sorted))
	for i, it := range x.sorted {
		out[i] = it.v
	}
	return out
}

// Resolve bounds-checks [off, off+n) in region id, or, when id is 0, the
// absolute range [off, off+n) in whichever region holds off. It returns
// the region's value, its span and the offset of the range within it. An
// unknown id or an address in no region wraps errdefs.ErrUnknownRegion; a
// range that does not fit wraps errdefs.ErrOutOfBounds.
func (x *Index[T]) Resolve(id, off, n uint64) (T, Span, uint64, error) {
	var zero T
	var it *indexed[T]
	if id != 0 {
		i, ok := x.byID[id]
		if !ok {
			return zero, Span{}, 0, fmt.Errorf("region %d: %w", id, errdefs.ErrUnknownRegion)
		}
		it = &x.sorted[i]
	} else {
		i := sort.Search(len(x.sorted), func(i int) bool { return x.sorted[i].span.Addr > off }) - 1
		if i < 0 || off-x.sorted[i].span.Addr >= x.sorted[i].span.Size {
			return zero, Span{}, 0, fmt.Errorf("address 0x%x is in none of %d regions: %w", off, len(x.sorted), errdefs.ErrUnknownRegion)
		}
		it = &x.sorted[i]
		off -= it.span.Addr
	}
	if err := Check(it.span.ID, it.span.Size, off, n); err != nil {
		return zero, Span{}, 0, err
	}
	return it.v, it.span, off, nil
}
