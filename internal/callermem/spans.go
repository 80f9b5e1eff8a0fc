package callermem

import "github.com/google/btree"

// span is a run of pages [start, end) that count leases hold.
type span struct {
	start, end uint64
	count      int
}

// spans counts, for every page of the address space, how many leases
// hold it, as disjoint runs with a count of at least 1. Its zero value is
// empty and ready; it is not safe for concurrent use.
type spans struct {
	t *btree.BTreeG[*span]
}

func (s *spans) tree() *btree.BTreeG[*span] {
	if s.t == nil {
		s.t = btree.NewG(8, func(a, b *span) bool { return a.start < b.start })
	}
	return s.t
}

// split makes at a boundary of the runs: a run holding at strictly
// inside it is cut in two.
func (s *spans) split(at uint64) {
	t := s.tree()
	var hit *span
	t.DescendLessOrEqual(&span{start: at}, func(r *span) bool { hit = r; return false })
	if hit == nil || hit.start == at || hit.end <= at {
		return
	}
	t.ReplaceOrInsert(&span{start: at, end: hit.end, count: hit.count})
	hit.end = at
}

// add counts [start, end) once more and returns the ranges that no lease
// held before (their count went from 0 to 1), in address order.
func (s *spans) add(start, end uint64) [][2]uint64 {
	s.split(start)
	s.split(end)
	t := s.tree()
	var fresh [][2]uint64
	next := start
	var covered []*span
	t.AscendRange(&span{start: start}, &span{start: end}, func(r *span) bool {
		covered = append(covered, r)
		return true
	})
	for _, r := range covered {
		if r.start > next {
			fresh = append(fresh, [2]uint64{next, r.start})
		}
		r.count++
		next = r.end
	}
	if next < end {
		fresh = append(fresh, [2]uint64{next, end})
	}
	for _, f := range fresh {
		t.ReplaceOrInsert(&span{start: f[0], end: f[1], count: 1})
	}
	return fresh
}

// remove counts [start, end) once less and returns the ranges no lease
// holds any more (their count went to 0), in address order, merged where
// adjacent. Pages of the range that no lease held are ignored.
func (s *spans) remove(start, end uint64) [][2]uint64 {
	s.split(start)
	s.split(end)
	t := s.tree()
	var covered []*span
	t.AscendRange(&span{start: start}, &span{start: end}, func(r *span) bool {
		covered = append(covered, r)
		return true
	})
	var gone [][2]uint64
	for _, r := range covered {
		r.count--
		if r.count > 0 {
			continue
		}
		t.Delete(r)
		if n := len(gone); n > 0 && gone[n-1][1] == r.start {
			gone[n-1][1] = r.end
		} else {
			gone = append(gone, [2]uint64{r.start, r.end})
		}
	}
	return gone
}

// held says whether any lease holds a page of [start, end).
func (s *spans) held(start, end uint64) bool {
	found := false
	t := s.tree()
	t.DescendLessOrEqual(&span{start: start}, func(r *span) bool {
		found = r.end > start
		return false
	})
	if !found {
		t.AscendRange(&span{start: start}, &span{start: end}, func(*span) bool { found = true; return false })
	}
	return found
}

// ranges lists the held runs, merged where adjacent, in address order.
func (s *spans) ranges() [][2]uint64 {
	var out [][2]uint64
	s.tree().Ascend(func(r *span) bool {
		if n := len(out); n > 0 && out[n-1][1] == r.start {
			out[n-1][1] = r.end
		} else {
			out = append(out, [2]uint64{r.start, r.end})
		}
		return true
	})
	return out
}

// empty says whether no page is held.
func (s *spans) empty() bool { return s.t == nil || s.t.Len() == 0 }
