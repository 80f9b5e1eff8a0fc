package regions

import (
	"errors"
	"testing"

	"github.com/kvconnect/kvconnect/errdefs"
)

type pub struct {
	id, addr, size uint64
	key            string
}

func pubSpan(p pub) Span { return Span{ID: p.id, Addr: p.addr, Size: p.size} }

func TestIndexResolve(t *testing.T) {
	x, err := NewIndex([]pub{{2, 5000, 50, "b"}, {1, 1000, 100, "a"}}, pubSpan)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name       string
		id, off, n uint64
		want       error
		key        string
		at         uint64
	}{
		{"by id", 1, 10, 90, nil, "a", 10},
		{"by id past end", 1, 10, 91, errdefs.ErrOutOfBounds, "", 0},
		{"by id overflow", 2, 1, ^uint64(0), errdefs.ErrOutOfBounds, "", 0},
		{"unknown id", 9, 0, 1, errdefs.ErrUnknownRegion, "", 0},
		{"by address", 0, 5010, 40, nil, "b", 10},
		{"address past end", 0, 5010, 41, errdefs.ErrOutOfBounds, "", 0},
		{"address in a gap", 0, 1100, 1, errdefs.ErrUnknownRegion, "", 0},
		{"address below all", 0, 10, 1, errdefs.ErrUnknownRegion, "", 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			v, sp, at, err := x.Resolve(tt.id, tt.off, tt.n)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Resolve = %v, want %v", err, tt.want)
			}
			if err == nil && (v.key != tt.key || at != tt.at || sp.ID != v.id) {
				t.Fatalf("Resolve = %+v %+v %d", v, sp, at)
			}
		})
	}
	if vs := x.Values(); len(vs) != 2 || vs[0].id != 1 || x.Len() != 2 {
		t.Fatalf("Values not in address order: %+v", vs)
	}
	if _, ok := x.Lookup(2); !ok {
		t.Fatal("Lookup(2) failed")
	}
}

func TestIndexRejects(t *testing.T) {
	for name, items := range map[string][]pub{
		"id 0":      {{0, 100, 10, ""}},
		"empty":     {{1, 100, 0, ""}},
		"wraps":     {{1, ^uint64(0) - 5, 10, ""}},
		"duplicate": {{1, 100, 10, ""}, {1, 200, 10, ""}},
		"overlap":   {{1, 100, 10, ""}, {2, 105, 10, ""}},
	} {
		if _, err := NewIndex(items, pubSpan); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", name, err)
		}
	}
}

// TestManyRegions: a table holds 100,000 regions registered at descending
// addresses (as mmap hands them out) and resolves each by id and address.
func TestManyRegions(t *testing.T) {
	const n, size = 100000, 4096
	var tb Table
	mem := make([]byte, size)
	for i := uint64(1); i <= n; i++ {
		if err := tb.Add(i, (n+1-i)*2*size, mem); err != nil {
			t.Fatal(err)
		}
	}
	if tb.Len() != n {
		t.Fatalf("Len = %d", tb.Len())
	}
	for i := uint64(1); i <= n; i += 997 {
		e, _, err := tb.Resolve(0, (n+1-i)*2*size+size-1, 1)
		if err != nil || e.ID != i {
			t.Fatalf("address of region %d: %v %v", i, e, err)
		}
		e.Release()
		if _, _, err := tb.Resolve(0, (n+1-i)*2*size+size, 1); !errors.Is(err, errdefs.ErrUnknownRegion) {
			t.Fatalf("gap after region %d: %v", i, err)
		}
	}
	if err := tb.Add(n+1, 3*size+10, mem); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("overlapping add: %v", err)
	}
}
