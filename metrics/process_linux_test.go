package metrics

import (
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"
)

// gatherValues is every series of c by name (one value each: process
// series have no labels).
func gatherValues(t *testing.T, c prometheus.Collector) map[string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	v := map[string]float64{}
	for _, f := range fams {
		if len(f.Metric) != 1 {
			t.Fatalf("%s: %d series, want 1", f.GetName(), len(f.Metric))
		}
		m := f.Metric[0]
		switch f.GetType() {
		case dto.MetricType_COUNTER:
			v[f.GetName()] = m.GetCounter().GetValue()
		case dto.MetricType_GAUGE:
			v[f.GetName()] = m.GetGauge().GetValue()
		default:
			t.Fatalf("%s: type %v", f.GetName(), f.GetType())
		}
	}
	return v
}

// TestProcessCollectorAgreesWithClientGolang: the Linux collector gives
// client_golang's process series (but the namespace-wide network
// counters), with client_golang's help texts (the pedantic registry
// checks what Describe and Collect say against each other), and values
// that agree with what client_golang's collector reads from /proc in the
// same moments.
func TestProcessCollectorAgreesWithClientGolang(t *testing.T) {
	ours := NewProcessCollector()
	theirs := collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})

	// Burn some CPU, so the counters are well above their resolution.
	x := 1.0
	for i := range 20_000_000 {
		x = math.Sqrt(x + float64(i))
	}
	_ = x

	before := gatherValues(t, theirs)
	got := gatherValues(t, ours)
	after := gatherValues(t, theirs)

	var names, want []string
	for n := range got {
		names = append(names, n)
	}
	for n := range after {
		if n != "process_network_receive_bytes_total" && n != "process_network_transmit_bytes_total" {
			want = append(want, n)
		}
	}
	slices.Sort(names)
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Fatalf("series %v, want client_golang's but the network counters: %v", names, want)
	}

	// Exact: limits, and the start time (client_golang's in 10 ms ticks
	// as well).
	for _, n := range []string{"process_max_fds", "process_virtual_memory_max_bytes", "process_start_time_seconds"} {
		if got[n] != after[n] {
			t.Errorf("%s = %v, client_golang's %v", n, got[n], after[n])
		}
	}
	// CPU: between client_golang's readings before and after, and not
	// zero. Theirs is /proc/self/stat's user and system times, each cut
	// to 10 ms ticks; ours getrusage's, in microseconds: up to two ticks
	// apart, and a third for the scheduler's own rounding.
	const tick = 0.03
	if c := got["process_cpu_seconds_total"]; c <= 0 || c < before["process_cpu_seconds_total"]-tick || c > after["process_cpu_seconds_total"]+tick {
		t.Errorf("process_cpu_seconds_total = %v, client_golang's %v before and %v after", c, before["process_cpu_seconds_total"], after["process_cpu_seconds_total"])
	}
	// Memory moves between readings; the same order of size, and RSS
	// within the address space.
	for _, n := range []string{"process_virtual_memory_bytes", "process_resident_memory_bytes"} {
		if g, w := got[n], after[n]; g <= 0 || g < w/2 || g > w*2 {
			t.Errorf("%s = %v, client_golang's %v", n, g, w)
		}
	}
	if got["process_resident_memory_bytes"] > got["process_virtual_memory_bytes"] {
		t.Errorf("resident %v above virtual %v", got["process_resident_memory_bytes"], got["process_virtual_memory_bytes"])
	}
}

// TestProcessCollectorCountsOpenFiles: files opened between two scrapes
// show in process_open_fds, and leave it when closed.
func TestProcessCollectorCountsOpenFiles(t *testing.T) {
	c := NewProcessCollector()
	base := gatherValues(t, c)["process_open_fds"]
	if base < 3 {
		t.Fatalf("process_open_fds = %v, want at least stdin, stdout, stderr", base)
	}
	const n = 300 // more than one Readdirnames chunk
	dir := t.TempDir()
	var files []*os.File
	t.Cleanup(func() {
		for _, f := range files {
			f.Close() // again for most: harmless
		}
	})
	for i := range n {
		f, err := os.Create(filepath.Join(dir, strconv.Itoa(i)))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	open := gatherValues(t, c)["process_open_fds"]
	for _, f := range files {
		f.Close()
	}
	closed := gatherValues(t, c)["process_open_fds"]
	// The runtime and earlier tests' leftovers (a finalizer, an idle HTTP
	// connection) may open or close a descriptor meanwhile: a slack of a
	// few, against the 300 counted.
	const slack = 8
	if open < base+n-slack || open > base+n+slack {
		t.Errorf("process_open_fds = %v with %d files opened, %v before", open, n, base)
	}
	if closed > open-n+slack {
		t.Errorf("process_open_fds = %v after closing %d files, %v while open", closed, n, open)
	}
}

func TestProcessParsers(t *testing.T) {
	stat := "4242 (a (weird) name) S 1 4242 4242 0 -1 4194560 1 0 0 0 5 6 0 0 20 0 9 0 123456 1000 200 18446744073709551615\n"
	if v, err := parseStartTicks([]byte(stat)); err != nil || v != 123456 {
		t.Errorf("parseStartTicks = %v, %v; want 123456", v, err)
	}
	for _, bad := range []string{"", "4242 no parens", "1 (x) S 1 2", "1 (x) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 x 20"} {
		if _, err := parseStartTicks([]byte(bad)); err == nil {
			t.Errorf("parseStartTicks(%q) = nil error", bad)
		}
	}
	all := "cpu  1 2 3\nintr 1 2\nctxt 99\nbtime 1764892800\nprocesses 7\n"
	if v, err := parseBootTime([]byte(all)); err != nil || v != 1764892800 {
		t.Errorf("parseBootTime = %v, %v", v, err)
	}
	for _, bad := range []string{"", "cpu 1\n", "btime x\n", "btime \n"} {
		if _, err := parseBootTime([]byte(bad)); err == nil {
			t.Errorf("parseBootTime(%q) = nil error", bad)
		}
	}
	if vs, rss, err := parseStatm([]byte("100 25 3 1 0 40 0\n"), 4096); err != nil || vs != 409600 || rss != 102400 {
		t.Errorf("parseStatm = %v, %v, %v", vs, rss, err)
	}
	for _, bad := range []string{"", "100", "x 1", "1 -2"} {
		if _, _, err := parseStatm([]byte(bad), 4096); err == nil {
			t.Errorf("parseStatm(%q) = nil error", bad)
		}
	}
}

// FuzzProcessParsers: no input makes the /proc parsers panic, and what
// they accept parses again the same.
func FuzzProcessParsers(f *testing.F) {
	f.Add([]byte("4242 (a (weird) name) S 1 4242 4242 0 -1 4194560 1 0 0 0 5 6 0 0 20 0 9 0 123456 1000 200\n"))
	f.Add([]byte("cpu  1 2 3\nbtime 1764892800\n"))
	f.Add([]byte("100 25 3 1 0 40 0\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if v, err := parseStartTicks(b); err == nil {
			if w, _ := parseStartTicks(slices.Clone(b)); w != v {
				t.Fatalf("parseStartTicks not deterministic: %d then %d", v, w)
			}
		}
		parseBootTime(b)
		if vs, rss, err := parseStatm(b, 4096); err == nil && (vs%4096 != 0 || rss%4096 != 0) {
			t.Fatalf("parseStatm(%q) = %d, %d: not whole pages", b, vs, rss)
		}
	})
}
