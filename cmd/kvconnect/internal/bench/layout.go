package bench

import (
	"slices"
	"strconv"
	"strings"
)

// layout maps a run's ops onto buffer blocks, the same way on both sides
// (an op moves block b of the local buffer to or from block b of the
// peer's). Thread t owns blocks [t*per, (t+1)*per) and its ops cycle
// through them, so the batches in flight at once never touch the same
// block; with fewer blocks than threads every thread cycles through all
// of them.
type layout struct {
	blocks, threads, per int
}

func newLayout(blocks, threads int) layout {
	l := layout{blocks: blocks, threads: threads, per: blocks}
	if blocks >= threads {
		l.per = blocks / threads
	}
	return l
}

func (l layout) shared() bool { return l.blocks < l.threads }

// part is thread t's first block and block count.
func (l layout) part(t int) (start, n int) {
	if l.shared() {
		return 0, l.blocks
	}
	return t * l.per, l.per
}

// block is the block thread t's k-th op moves.
func (l layout) block(t int, k uint64) uint64 {
	start, n := l.part(t)
	return uint64(start) + k%uint64(n)
}

// touched lists the blocks moved when thread t has issued ops[t] ops.
func (l layout) touched(ops []uint64) Blocks {
	var b Blocks
	if l.shared() {
		var sum uint64
		for _, k := range ops {
			sum += k
		}
		if c := min(sum, uint64(l.blocks)); c > 0 {
			b = append(b, BlockRange{0, int(c)})
		}
		return b
	}
	for t, k := range ops {
		start, n := l.part(t)
		if c := min(k, uint64(n)); c > 0 {
			b = append(b, BlockRange{start, int(c)})
		}
	}
	return b.merged()
}

// BlockRange is Count blocks from block Start.
type BlockRange struct {
	Start int `json:"start"`
	Count int `json:"count"`
}

// Blocks is a set of block ranges.
type Blocks []BlockRange

// Total is the number of blocks.
func (b Blocks) Total() int {
	n := 0
	for _, r := range b {
		n += r.Count
	}
	return n
}

func (b Blocks) merged() Blocks {
	s := slices.Clone(b)
	slices.SortFunc(s, func(x, y BlockRange) int { return x.Start - y.Start })
	var out Blocks
	for _, r := range s {
		if r.Count <= 0 {
			continue
		}
		if k := len(out) - 1; k >= 0 && out[k].Start+out[k].Count >= r.Start {
			out[k].Count = max(out[k].Count, r.Start+r.Count-out[k].Start)
			continue
		}
		out = append(out, r)
	}
	return out
}

// String is "0..15, 32..47", or "none".
func (b Blocks) String() string {
	if len(b) == 0 {
		return "none"
	}
	parts := make([]string, len(b))
	for i, r := range b {
		parts[i] = strconv.Itoa(r.Start)
		if r.Count > 1 {
			parts[i] += ".." + strconv.Itoa(r.Start+r.Count-1)
		}
	}
	return strings.Join(parts, ", ")
}
