package bench

import (
	"bytes"
	"math"
	"strings"
	"testing"
)

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

// TestRoundsMeeting counts the rounds whose ratio met its target, so a
// median on the target's edge shows as the coin toss it is.
func TestRoundsMeeting(t *testing.T) {
	atLeast1 := func(v float64) bool { return v >= 1 }
	for _, tc := range []struct {
		name string
		vals []float64
		ok   func(float64) bool
		want string
	}{
		{"none measured", nil, atLeast1, "–"},
		{"all", []float64{1.2, 1.0, 1.5}, atLeast1, "3 of 3"},
		{"a coin toss", []float64{0.97, 1.3, 0.88, 1.42, 1.01}, atLeast1, "3 of 5"},
		{"none", []float64{0.5, 0.9}, atLeast1, "0 of 2"},
		{"at most", []float64{1.2, 1.4, 1.31}, func(v float64) bool { return v <= 1.3 }, "1 of 3"},
	} {
		if got := roundsMeeting(summarize(tc.vals), tc.ok); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestMooncakeTableRoundsMeeting: the Mooncake comparison table says in
// how many rounds each row met its target, and nothing for a row that
// has none.
func TestMooncakeTableRoundsMeeting(t *testing.T) {
	res := &SuiteResult{Rounds: 5, PluginVsInProcess: map[string]map[string]summary{}, VsMooncake: []Comparison{
		{Variant: VariantMCPtoKV, Base: VariantMCPtoMC, Op: Read, BlockSize: 16 << 10, Ratio: summarize([]float64{0.97, 1.3, 0.88, 1.42, 1.01}), Target: 1},
		{Variant: VariantTCPPlugin, Base: VariantMCPtoMC, Op: Read, BlockSize: 16 << 10, Ratio: summarize([]float64{8, 9})},
	}}
	wantRows(t, res,
		"| "+VariantMCPtoKV+" | "+VariantMCPtoMC+" | READ | 16KiB | **1.01** | 0.88–1.42 | 1.00 | yes | 3 of 5 | – |",
		"| "+VariantTCPPlugin+" | "+VariantMCPtoMC+" | READ | 16KiB | **8.50** | 8.00–9.00 | – | – | – | – |",
	)
}

// wantRows fails t for each row res's report (without the machine) lacks.
func wantRows(t *testing.T, res *SuiteResult, rows ...string) {
	t.Helper()
	var md bytes.Buffer
	res.WriteMarkdown(&md, false)
	out := md.String()
	for _, want := range rows {
		if !strings.Contains(out, want) {
			t.Errorf("no row %q in\n%s", want, out)
		}
	}
}

// TestPluginVsInProcessByTopology: each plugin variant is compared with
// the in-process variant of its own topology, round by round, and the
// 1 MiB targets say which comparison they are: the two-process one as
// deployed, the loopback one for reference.
func TestPluginVsInProcessByTopology(t *testing.T) {
	cell := func(v string, gbps ...float64) *Cell {
		c := &Cell{Variant: v, Op: Write, BlockSize: 1 << 20}
		for i, g := range gbps {
			c.Results = append(c.Results, Result{Round: i + 1, GBps: g})
		}
		return c
	}
	res := &SuiteResult{Rounds: 3, PluginVsInProcess: map[string]map[string]summary{}, Cells: []*Cell{
		cell(VariantTCPPlugin, 4.0, 4.0, 4.0),
		cell(VariantTCPInProc, 5.0, 5.0, 5.0), // 0.80: misses 0.95
		cell(VariantTCPPlugin2P, 3.92, 4.0, 3.2),
		cell(VariantTCPInProc2P, 4.0, 4.0, 4.0), // 0.98, 1.00, 0.80: meets it, 2 of 3
	}}
	summarizeSuite(res)
	got := res.PluginVsInProcess["WRITE 1MiB"]
	if s := got[VariantTCPPlugin2P]; s.N != 3 || math.Abs(s.Median-0.98) > 1e-9 {
		t.Errorf("two processes: %+v, want the median of 0.98, 1.00, 0.80", s)
	}
	if s := got[VariantTCPPlugin]; s.N != 3 || math.Abs(s.Median-0.8) > 1e-9 {
		t.Errorf("loopback: %+v, want 0.80", s)
	}
	wantRows(t, res,
		"| "+VariantTCPPlugin2P+" / "+VariantTCPInProc2P+", WRITE 1MiB ≥ 0.95 | 0.980 (0.80–1.00) | yes | 2 of 3 |",
		"| "+VariantTCPPlugin+" / "+VariantTCPInProc+", both nodes in one process (loopback), for reference, WRITE 1MiB ≥ 0.95 | 0.800 (0.80–0.80) | **no** | 0 of 3 |",
		"| "+VariantTCPPlugin2P+" / "+VariantTCPInProc2P+", READ 1MiB ≥ 0.95 | not measured | – | – |",
		"| WRITE | 1MiB | 0.98 | 0.80–1.00 | 0.80 | 0.80–0.80 |",
	)
}
