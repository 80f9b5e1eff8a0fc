package plugins

import "github.com/kvconnect/kvconnect/internal/suggest"

// Closest returns the candidate nearest to s, ignoring case, when it is
// near enough to be a typo of it: at most 2 edits (a swap of two adjacent
// letters counts as one) and fewer than half of s; failing that, the only
// candidate that s (3 letters or more) begins. It returns "" when none is,
// or when s is itself a candidate. Ties go to the earlier candidate.
// Transports use it for "did you mean" hints.
func Closest(s string, candidates []string) string { return suggest.Closest(s, candidates) }
