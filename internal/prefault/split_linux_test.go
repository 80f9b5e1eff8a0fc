//go:build linux

package prefault

import "testing"

// The parts ForKernel reads at the same time cover the memory's pages
// once each, cut at page boundaries, in as many parts as processors
// when the memory is large enough and in one when it is not.
func TestSplit(t *testing.T) {
	const page = 4096
	for _, tc := range []struct {
		name            string
		n, first, procs int
		parts           int
	}{
		{"small", 100 * page, page, 2, 1},
		{"one processor", 10 * minPartPages * page, page, 1, 1},
		{"just under two parts", (2*minPartPages - 1) * page, page, 4, 1},
		{"two parts, aligned", 2 * minPartPages * page, page, 2, 2},
		{"three of four processors", 3 * minPartPages * page, page, 4, 3},
		{"unaligned ends", 8*minPartPages*page + 100, 17, 4, 4},
		{"within one page", 10, 4000, 8, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cuts := split(tc.n, tc.first, page, tc.procs)
			if len(cuts)-1 != tc.parts {
				t.Fatalf("cuts %v: %d parts, want %d", cuts, len(cuts)-1, tc.parts)
			}
			if cuts[0] != 0 || cuts[len(cuts)-1] != tc.n {
				t.Fatalf("cuts %v do not span [0, %d)", cuts, tc.n)
			}
			for i := 1; i < len(cuts)-1; i++ {
				if cuts[i] <= cuts[i-1] || (cuts[i]-tc.first)%page != 0 {
					t.Errorf("cut %d at %d: not increasing or not on a page boundary (first boundary %d)", i, cuts[i], tc.first)
				}
			}
		})
	}
}
