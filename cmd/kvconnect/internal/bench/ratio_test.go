package bench

import "testing"

// TestPairedRatio pairs results by round, skipping rounds one side lacks.
func TestPairedRatio(t *testing.T) {
	a := &Cell{Results: []Result{{Round: 1, LatencyP50: 30}, {Round: 2, LatencyP50: 60}, {Round: 4, LatencyP50: 10}}}
	b := &Cell{Results: []Result{{Round: 1, LatencyP50: 20}, {Round: 2, LatencyP50: 20}, {Round: 3, LatencyP50: 5}}}
	for _, tc := range []struct {
		name   string
		a, b   *Cell
		n      int
		median float64
	}{
		{"paired by round", a, b, 2, 2.25},
		{"missing base", a, nil, 0, 0},
		{"same cell", a, a, 0, 0},
	} {
		s := pairedRatio(tc.a, tc.b, p50Of)
		if s.N != tc.n || (tc.n > 0 && s.Median != tc.median) {
			t.Errorf("%s: got N=%d median=%v, want N=%d median=%v", tc.name, s.N, s.Median, tc.n, tc.median)
		}
	}
}
