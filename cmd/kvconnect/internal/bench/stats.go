package bench

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// percentile returns the nearest-rank p-th percentile (0 < p <= 100) of
// sorted samples, 0 for none.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	rank = min(max(rank, 1), len(sorted))
	return sorted[rank-1]
}

// latencySummary sorts lat in place and returns p50, p99 and the maximum.
func latencySummary(lat []time.Duration) (p50, p99, pmax time.Duration) {
	if len(lat) == 0 {
		return 0, 0, 0
	}
	slices.Sort(lat)
	return percentile(lat, 50), percentile(lat, 99), lat[len(lat)-1]
}

// summary is the median and range of a few measurements.
type summary struct {
	Median float64   `json:"median"`
	Min    float64   `json:"min"`
	Max    float64   `json:"max"`
	N      int       `json:"n"`
	vals   []float64 // the measurements, sorted
}

// meeting counts the measurements for which ok holds.
func (s summary) meeting(ok func(float64) bool) int {
	n := 0
	for _, v := range s.vals {
		if ok(v) {
			n++
		}
	}
	return n
}

// roundsMeeting says in how many of its rounds a ratio met its target,
// "k of N": a median near the target is a coin toss when k is about
// half of N, and a real result when k is N or 0.
func roundsMeeting(s summary, ok func(float64) bool) string {
	if s.N == 0 {
		return "–"
	}
	return fmt.Sprintf("%d of %d", s.meeting(ok), s.N)
}

func summarize(xs []float64) summary {
	if len(xs) == 0 {
		return summary{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return summary{Median: m, Min: s[0], Max: s[len(s)-1], N: len(s), vals: s}
}
