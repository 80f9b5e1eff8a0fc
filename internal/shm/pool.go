package shm

import (
	"errors"
	"fmt"
	"math/bits"
	"os"
	"sync"
)

// DefaultSlabSize is the size of one slab of a Pool.
const DefaultSlabSize = 64 << 20

// Pool hands out shared memory so that many small regions cost a handful
// of file descriptors and mappings, not one each: a request of at most a
// quarter of the slab size is a page-aligned piece of a slab (one sealed
// memfd, mapped once, shared by many pieces); a larger one gets a memfd of
// its own, as New makes. Freeing a piece returns its pages to the system
// (a hole punched in the slab, so a later piece at the same place starts
// out zeroed, like fresh memory), and a slab whose last piece is freed is
// unmapped and closed.
//
// A Pool is safe for concurrent use. Its zero value is not usable; call
// NewPool. It needs no Close: it holds nothing once every piece is freed.
type Pool struct {
	prefix   string
	slabSize int
	page     int

	mu    sync.Mutex
	slabs []*slab // open slabs, oldest first (first fit packs them)
	next  int     // number of the next slab, for its memfd's name
}

// NewPool returns a pool whose memfds are named kvconnect:<prefix>slab-N,
// with slabs of slabSize bytes (DefaultSlabSize when 0; rounded up to the
// page size).
func NewPool(prefix string, slabSize int) *Pool {
	page := PageSize()
	if slabSize <= 0 {
		slabSize = DefaultSlabSize
	}
	slabSize = (slabSize + page - 1) / page * page
	return &Pool{prefix: prefix, slabSize: slabSize, page: page}
}

// slab is one memfd of a pool with a bitmap of its pages in use. Guarded
// by the pool's mu, except seg, which is set once.
type slab struct {
	seg    *Segment
	name   string
	used   []uint64 // one bit per page
	pages  int
	pieces int
	hint   int // no free page below this one
}

// Piece is memory handed out by a Pool: a range of a slab, or a segment
// of its own. Its methods are safe for concurrent use.
type Piece struct {
	pool *Pool
	slab *slab    // nil for a segment of its own
	seg  *Segment // the slab's, or its own
	off  int      // first byte in the file
	span int      // bytes reserved (whole pages)
	mem  []byte

	once sync.Once
	err  error
}

// Alloc returns size bytes of zeroed shared memory, faulted in. name
// names the memfd of a large request (kvconnect:<name>); a small one is
// carved from a slab.
func (p *Pool) Alloc(name string, size int) (*Piece, error) {
	if err := checkSize(size); err != nil {
		return nil, err
	}
	if size > p.slabSize/4 {
		seg, err := New(name, size)
		if err != nil {
			return nil, err
		}
		return &Piece{pool: p, seg: seg, span: size, mem: seg.Bytes()}, nil
	}
	pages := (size + p.page - 1) / p.page
	p.mu.Lock()
	var s *slab
	first := -1
	for _, cand := range p.slabs {
		if first = cand.find(pages); first >= 0 {
			s = cand
			break
		}
	}
	if s == nil {
		p.next++
		name := fmt.Sprintf("%sslab-%d", p.prefix, p.next)
		seg, err := NewLazy(name, p.slabSize)
		if err != nil {
			p.mu.Unlock()
			return nil, err
		}
		n := p.slabSize / p.page
		s = &slab{seg: seg, name: name, used: make([]uint64, (n+63)/64), pages: n}
		p.slabs = append(p.slabs, s)
		first = s.find(pages)
	}
	s.mark(first, pages, true)
	s.pieces++
	p.mu.Unlock()
	off := first * p.page
	all := s.seg.Bytes()
	mem := all[off : off+size : off+size]
	pc := &Piece{pool: p, slab: s, seg: s.seg, off: off, span: pages * p.page, mem: mem}
	if err := Populate(mem); err != nil {
		pc.free()
		return nil, err
	}
	return pc, nil
}

// find returns the first page of a run of n free pages, or -1.
func (s *slab) find(n int) int {
	run, start := 0, 0
	for i := s.hint; i < s.pages; {
		if i%64 == 0 {
			switch w := s.used[i/64]; {
			case w == ^uint64(0):
				run = 0
				i += 64
				continue
			case w == 0 && i+64 <= s.pages:
				if run == 0 {
					start = i
				}
				if run += 64; run >= n {
					return start
				}
				i += 64
				continue
			}
		}
		if s.used[i/64]&(1<<(i%64)) != 0 {
			run = 0
			i++
			continue
		}
		if run == 0 {
			start = i
		}
		if run++; run >= n {
			return start
		}
		i++
	}
	return -1
}

// mark sets or clears the bits of pages [first, first+n).
func (s *slab) mark(first, n int, inUse bool) {
	for i := first; i < first+n; i++ {
		if inUse {
			s.used[i/64] |= 1 << (i % 64)
		} else {
			s.used[i/64] &^= 1 << (i % 64)
		}
	}
	if inUse {
		if first == s.hint {
			s.hint = first + n
			for s.hint < s.pages && s.used[s.hint/64]&(1<<(s.hint%64)) != 0 {
				s.hint++
			}
		}
	} else if first < s.hint {
		s.hint = first
	}
}

// inUse counts the pages in use (for tests).
func (s *slab) inUse() int {
	n := 0
	for _, w := range s.used {
		n += bits.OnesCount64(w)
	}
	return n
}

// Bytes is the piece's memory. It must not be used after Free.
func (pc *Piece) Bytes() []byte { return pc.mem }

// File is the shared-memory file holding the piece (shared with other
// pieces of the same slab). It stays open until Free.
func (pc *Piece) File() *os.File { return pc.seg.File() }

// FileOffset is where the piece starts within File.
func (pc *Piece) FileOffset() uint64 { return uint64(pc.off) }

// Free returns the piece to its pool: its pages go back to the system,
// and its slab is unmapped and closed if this was its last piece. It is
// idempotent. Nobody may touch the memory afterwards.
func (pc *Piece) Free() error {
	pc.once.Do(func() { pc.err = pc.free() })
	return pc.err
}

func (pc *Piece) free() error {
	if pc.slab == nil {
		return pc.seg.Close()
	}
	p, s := pc.pool, pc.slab
	// Punch before the pages are free again, so no new piece's data is
	// punched away. Without hole punching, zero them: a new piece must
	// start out zeroed.
	var errs []error
	if err := Punch(s.seg.File(), uint64(pc.off), uint64(pc.span)); err != nil {
		clear(s.seg.Bytes()[pc.off : pc.off+pc.span])
	}
	p.mu.Lock()
	s.mark(pc.off/p.page, pc.span/p.page, false)
	s.pieces--
	last := s.pieces == 0
	if last {
		for i, o := range p.slabs {
			if o == s {
				p.slabs = append(p.slabs[:i], p.slabs[i+1:]...)
				break
			}
		}
	}
	p.mu.Unlock()
	if last {
		if err := s.seg.Close(); err != nil {
			errs = append(errs, fmt.Errorf("shm: closing %s: %w", s.name, err))
		}
	}
	return errors.Join(errs...)
}

// Slabs is the number of slabs open (for tests and status).
func (p *Pool) Slabs() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.slabs)
}
