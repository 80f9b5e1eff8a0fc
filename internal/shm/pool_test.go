package shm

import (
	"math/rand/v2"
	"testing"
)

// TestPoolPacksSmallPieces: many small pieces share a slab, each page
// aligned and zeroed, disjoint; a large one gets its own memfd; freeing
// the last piece of a slab closes it, and freed pages come back zeroed.
func TestPoolPacksSmallPieces(t *testing.T) {
	p := NewPool("test-", 1<<20) // 256 pages
	page := PageSize()
	var pieces []*Piece
	for i := 0; i < 300; i++ {
		pc, err := p.Alloc("big", 100+i)
		if err != nil {
			t.Fatal(err)
		}
		if pc.FileOffset()%uint64(page) != 0 || len(pc.Bytes()) != 100+i || cap(pc.Bytes()) != 100+i {
			t.Fatalf("piece %d: offset %d len %d cap %d", i, pc.FileOffset(), len(pc.Bytes()), cap(pc.Bytes()))
		}
		for _, b := range pc.Bytes() {
			if b != 0 {
				t.Fatalf("piece %d is not zeroed", i)
			}
		}
		pc.Bytes()[0], pc.Bytes()[len(pc.Bytes())-1] = byte(i), byte(i)
		pieces = append(pieces, pc)
	}
	if got := p.Slabs(); got != 2 {
		t.Fatalf("%d slabs for 300 one-page pieces of 256-page slabs, want 2", got)
	}
	if pieces[0].File() != pieces[255].File() || pieces[0].File() == pieces[256].File() {
		t.Fatal("pieces are not packed into slabs in order")
	}
	for i, pc := range pieces {
		if pc.Bytes()[0] != byte(i) || pc.Bytes()[len(pc.Bytes())-1] != byte(i) {
			t.Fatalf("piece %d was overwritten by another", i)
		}
	}
	big, err := p.Alloc("big", 1<<19) // more than a quarter slab: its own memfd
	if err != nil {
		t.Fatal(err)
	}
	if big.FileOffset() != 0 || big.File() == pieces[0].File() || p.Slabs() != 2 {
		t.Fatal("a large piece was carved from a slab")
	}
	big.Bytes()[0] = 1
	if err := big.Free(); err != nil {
		t.Fatal(err)
	}
	// Free the second slab's pieces: it closes.
	for _, pc := range pieces[256:] {
		if err := pc.Free(); err != nil {
			t.Fatal(err)
		}
		if err := pc.Free(); err != nil {
			t.Fatalf("second Free: %v", err)
		}
	}
	if got := p.Slabs(); got != 1 {
		t.Fatalf("%d slabs open after the second one emptied, want 1", got)
	}
	// A freed page is reused zeroed.
	pieces[10].Free()
	again, err := p.Alloc("x", 50)
	if err != nil {
		t.Fatal(err)
	}
	if again.FileOffset() != pieces[10].FileOffset() || again.Bytes()[0] != 0 {
		t.Fatalf("reused piece at %d (want %d), first byte %d", again.FileOffset(), pieces[10].FileOffset(), again.Bytes()[0])
	}
	again.Free()
	for _, pc := range pieces[:256] {
		pc.Free()
	}
	if got := p.Slabs(); got != 0 {
		t.Fatalf("%d slabs open after every piece was freed", got)
	}
}

// TestPoolRandomSizes: pieces of random sizes allocated and freed in
// random order never overlap, and the bitmap ends empty.
func TestPoolRandomSizes(t *testing.T) {
	p := NewPool("rand-", 1<<20)
	page := PageSize()
	r := rand.New(rand.NewPCG(1, 2))
	live := map[*Piece]bool{}
	for step := 0; step < 2000; step++ {
		if len(live) > 0 && r.IntN(3) == 0 {
			for pc := range live {
				pc.Free()
				delete(live, pc)
				break
			}
			continue
		}
		pc, err := p.Alloc("r", 1+r.IntN(64<<10))
		if err != nil {
			t.Fatal(err)
		}
		lo := pc.FileOffset()
		hi := lo + uint64(len(pc.Bytes()))
		for o := range live {
			if o.File() == pc.File() && lo < o.FileOffset()+uint64(len(o.Bytes())) && o.FileOffset() < hi {
				t.Fatalf("step %d: piece [%d,%d) overlaps [%d,+%d)", step, lo, hi, o.FileOffset(), len(o.Bytes()))
			}
		}
		if pc.slab != nil && int(lo)%page != 0 {
			t.Fatal("unaligned piece")
		}
		live[pc] = true
	}
	for pc := range live {
		pc.Free()
	}
	if p.Slabs() != 0 {
		t.Fatalf("%d slabs left", p.Slabs())
	}
}

func TestPoolRejectsBadSize(t *testing.T) {
	p := NewPool("bad-", 0)
	for _, n := range []int{0, -1, MaxSize + 1} {
		if _, err := p.Alloc("bad", n); err == nil {
			t.Errorf("Alloc(%d) succeeded", n)
		}
	}
}

func TestSlabFind(t *testing.T) {
	s := &slab{used: make([]uint64, 3), pages: 150}
	for _, tc := range []struct {
		set  [][2]int // runs marked in use
		n    int
		want int
	}{
		{nil, 1, 0},
		{nil, 150, 0},
		{nil, 151, -1},
		{[][2]int{{0, 64}}, 1, 64},
		{[][2]int{{0, 1}, {2, 70}}, 1, 1},
		{[][2]int{{0, 1}, {2, 70}}, 2, 72},
		{[][2]int{{0, 149}}, 1, 149},
		{[][2]int{{0, 149}}, 2, -1},
		{[][2]int{{10, 1}}, 100, 11},
	} {
		clear(s.used)
		s.hint = 0
		for _, r := range tc.set {
			s.mark(r[0], r[1], true)
		}
		if got := s.find(tc.n); got != tc.want {
			t.Errorf("used %v: find(%d) = %d, want %d", tc.set, tc.n, got, tc.want)
		}
	}
	if s.inUse() != 1 {
		t.Errorf("inUse %d", s.inUse())
	}
}
