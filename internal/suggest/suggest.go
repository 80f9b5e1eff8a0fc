// Package suggest finds the "did you mean" candidate for a mistyped name:
// a configuration key, a transport, a transport option. It is a leaf
// (the standard library only), so configuration, the plugin host and
// transports share one notion of a typo without importing each other.
package suggest

import "strings"

// Closest returns the candidate nearest to s, ignoring case, when it is
// near enough to be a typo of it: at most 2 edits (a swap of two adjacent
// letters counts as one) and fewer than half of s; failing that, the only
// candidate that s (3 letters or more) begins. It returns "" when none is,
// or when s is itself a candidate. Ties go to the earlier candidate.
func Closest(s string, candidates []string) string {
	ls := strings.ToLower(s)
	best, bestD := "", -1
	for _, c := range candidates {
		d := editDistance(ls, strings.ToLower(c))
		if d > 2 || d*2 > len([]rune(s)) || (d == 0 && c == s) {
			continue
		}
		if bestD < 0 || d < bestD {
			best, bestD = c, d
		}
	}
	if best != "" || len([]rune(s)) < 3 {
		return best
	}
	for _, c := range candidates { // "npu" -> "npu_id"
		if lc := strings.ToLower(c); strings.HasPrefix(lc, ls) && lc != ls {
			if best != "" {
				return "" // ambiguous
			}
			best = c
		}
	}
	return best
}

// editDistance is the optimal string alignment distance between a and b:
// insertions, deletions, substitutions and swaps of adjacent letters each
// cost 1. Strings longer than 256 runes only compare equal or not.
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	if len(ra) > 256 || len(rb) > 256 {
		if a == b {
			return 0
		}
		return max(len(ra), len(rb))
	}
	d := make([][]int, len(ra)+1)
	for i := range d {
		d[i] = make([]int, len(rb)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(ra); i++ {
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(ra)][len(rb)]
}
