package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvconnect/kvconnect/connector"
	"github.com/kvconnect/kvconnect/internal/testbin"
	"github.com/kvconnect/kvconnect/transports/tcp"
	"github.com/kvconnect/kvconnect/units"
)

// envRawServer makes the test binary act as the raw baseline's server
// process (what kvconnect bench --raw-server does), so the tests need not
// build the CLI.
const envRawServer = "KVCONNECT_BENCH_TEST_RAW_SERVER"

func TestMain(m *testing.M) {
	if os.Getenv(envRawServer) != "" {
		size := 0
		if len(os.Args) == 3 && os.Args[1] == "--buffer-size" {
			size, _ = strconv.Atoi(os.Args[2])
		}
		if err := ServeRawProcess(os.Stdin, os.Stdout, size); err != nil {
			fmt.Fprintln(os.Stderr, "raw server:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	testbin.HostSide()
	testbin.Main(m)
}

// tcpPluginDir builds the tcp plugin and returns its directory; the
// configuration under test reads no plugin directory from the environment.
func tcpPluginDir(t *testing.T) string {
	t.Helper()
	t.Setenv("KVCONNECT_PLUGIN_DIR", "")
	return testbin.PluginDir(t, "tcp")
}

// rawServerCommand is the argv of a raw baseline server process: this
// test binary (see TestMain); the caller appends --buffer-size <bytes>.
func rawServerCommand(t *testing.T) []string {
	t.Helper()
	t.Setenv(envRawServer, "1")
	return []string{os.Args[0]}
}

// checkGoroutines fails if goroutines started during the test outlive it.
func checkGoroutines(t *testing.T) {
	t.Helper()
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(testbin.WaitLimit)
		for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if n := runtime.NumGoroutine(); n > before {
			buf := make([]byte, 1<<20)
			t.Errorf("%d goroutines before, %d after:\n%s", before, n, buf[:runtime.Stack(buf, true)])
		}
	})
}

func TestPercentile(t *testing.T) {
	var lat []time.Duration
	for i := 100; i >= 1; i-- {
		lat = append(lat, time.Duration(i)*time.Millisecond)
	}
	p50, p99, pmax := latencySummary(lat)
	if p50 != 50*time.Millisecond || p99 != 99*time.Millisecond || pmax != 100*time.Millisecond {
		t.Fatalf("p50 %v p99 %v max %v, want 50ms 99ms 100ms", p50, p99, pmax)
	}
	if p50, p99, _ := latencySummary([]time.Duration{7}); p50 != 7 || p99 != 7 {
		t.Fatalf("one sample: p50 %v p99 %v", p50, p99)
	}
	if s := summarize([]float64{3, 1, 2, 10}); s.Median != 2.5 || s.Min != 1 || s.Max != 10 || s.N != 4 {
		t.Fatalf("summarize: %+v", s)
	}
}

func TestParseStatCPU(t *testing.T) {
	// comm with spaces and parentheses; utime 250, stime 50 ticks.
	line := "1234 (my (odd) proc) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 3 0 100 0 0"
	d, err := parseStatCPU(line)
	if err != nil || d != 3*time.Second {
		t.Fatalf("got %v, %v; want 3s", d, err)
	}
	if _, err := parseStatCPU("garbage"); err == nil {
		t.Fatal("no error for a malformed line")
	}
	self, err := processCPU(os.Getpid())
	if err != nil || self < 0 {
		t.Fatalf("own CPU: %v, %v", self, err)
	}
}

func TestParseStatusSwitches(t *testing.T) {
	const head = "Name:\tkvconnect\nState:\tS (sleeping)\nThreads:\t9\n"
	for _, tc := range []struct {
		name, status string
		want         int64
		err          bool
	}{
		{"both", head + "voluntary_ctxt_switches:\t120\nnonvoluntary_ctxt_switches:\t7\n", 127, false},
		{"no trailing newline", head + "voluntary_ctxt_switches:\t1\nnonvoluntary_ctxt_switches:\t2", 3, false},
		{"zero", "voluntary_ctxt_switches:  0\nnonvoluntary_ctxt_switches:  0\n", 0, false},
		{"voluntary only", head + "voluntary_ctxt_switches:\t120\n", 0, true},
		{"neither", head, 0, true},
		{"not a number", "voluntary_ctxt_switches:\tmany\nnonvoluntary_ctxt_switches:\t7\n", 0, true},
		{"negative", "voluntary_ctxt_switches:\t-1\nnonvoluntary_ctxt_switches:\t7\n", 0, true},
		{"twice", "voluntary_ctxt_switches:\t1\nvoluntary_ctxt_switches:\t1\nnonvoluntary_ctxt_switches:\t7\n", 0, true},
	} {
		got, err := parseStatusSwitches(tc.status)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("%s: got %d, %v; want %d, error %v", tc.name, got, err, tc.want, tc.err)
		}
	}
}

func FuzzParseStatusSwitches(f *testing.F) {
	f.Add("voluntary_ctxt_switches:\t120\nnonvoluntary_ctxt_switches:\t7\n")
	f.Add("voluntary_ctxt_switches:\n")
	f.Add(":\n:::\n")
	f.Fuzz(func(t *testing.T, status string) {
		if n, err := parseStatusSwitches(status); err == nil && n < 0 {
			t.Fatalf("%q: %d switches", status, n)
		}
	})
}

// TestProcessSwitches follows a real process: a cat that sleeps in read
// between the lines this test sends it makes a context switch for each
// line it waits for, and processSwitches (all its threads) sees them.
func TestProcessSwitches(t *testing.T) {
	cat, err := exec.LookPath("cat")
	if err != nil {
		t.Skip("no cat binary on PATH")
	}
	cmd := exec.Command(cat)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	outPipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { in.Close(); cmd.Wait() }()
	out := bufio.NewReader(outPipe)
	echo := func() {
		if _, err := io.WriteString(in, "x\n"); err != nil {
			t.Fatal(err)
		}
		if _, err := out.ReadString('\n'); err != nil { // cat has read it, and waits again
			t.Fatal(err)
		}
	}
	echo()
	before, err := snapshotCPU([]int{cmd.Process.Pid})
	if err != nil {
		t.Fatal(err)
	}
	const lines = 20
	for range lines {
		echo()
	}
	after, err := snapshotCPU([]int{cmd.Process.Pid})
	if err != nil {
		t.Fatal(err)
	}
	host, other := after.switchesSince(before)
	if other < lines {
		t.Errorf("cat made %d context switches waiting for %d lines; want at least one per line", other, lines)
	}
	if host < 1 {
		t.Errorf("this process made %d context switches waiting for %d echoes", host, lines)
	}
	if _, err := processSwitches(-1); err == nil {
		t.Error("no error for a process that does not exist")
	}
}

func TestPattern(t *testing.T) {
	for _, bs := range []int{4096, 1000, 7} { // aligned and unaligned blocks
		buf := make([]byte, 10*bs)
		fillPattern(buf, 0, 42)
		all := Blocks{{0, 10}}
		if v := verifyBlocks(buf, bs, all, 42, "test"); !v.OK || v.Checked != 10 || v.Blocks != "0..9" {
			t.Fatalf("block size %d: %+v", bs, v)
		}
		if v := verifyBlocks(buf, bs, all, 43, "test"); v.OK || v.Mismatched != 10 {
			t.Fatalf("block size %d, other seed: %+v", bs, v)
		}
		buf[3*bs+bs/2] ^= 1
		buf[7*bs] ^= 0x80
		if v := verifyBlocks(buf, bs, all, 42, "test"); v.OK || v.Mismatched != 2 || len(v.FirstBad) != 2 || v.FirstBad[0] != 3 || v.FirstBad[1] != 7 {
			t.Fatalf("block size %d, two damaged blocks: %+v", bs, v)
		}
		// A block filled on its own matches the same block of a whole-buffer fill.
		one := make([]byte, bs)
		fillPattern(one, uint64(5*bs), 42)
		if !bytes.Equal(one, buf[5*bs:6*bs]) {
			t.Fatalf("block size %d: block-wise fill differs from buffer fill", bs)
		}
	}
	if v := verifyBlocks(make([]byte, 100), 10, nil, 1, "test"); v.OK || v.Error == "" {
		t.Fatalf("zero blocks verified OK: %+v", v)
	}
	if v := verifyBlocks(make([]byte, 100), 10, Blocks{{5, 6}}, 1, "test"); v.OK || v.Error == "" {
		t.Fatalf("too many blocks verified OK: %+v", v)
	}
}

// TestTCPConnections: the suite reads transports.tcp.connections as the
// tcp transport does (its default, its types, its range): a value the
// transport would refuse is refused before anything starts.
func TestTCPConnections(t *testing.T) {
	for _, tc := range []struct {
		v    any
		want int
		bad  bool
	}{
		{nil, tcp.DefaultOptions().Connections, false}, {int64(8), 8, false}, {8, 8, false}, {float64(2), 2, false},
		{"16", 0, true}, {float64(2.5), 0, true}, {"many", 0, true}, {int64(0), 0, true}, {int64(65), 0, true},
	} {
		cfg := connector.Config{}
		if tc.v != nil {
			cfg.Transports = map[string]map[string]any{tcp.Name: {"connections": tc.v}}
		}
		n, err := TCPConnections(cfg)
		if tc.bad != (err != nil) || n != tc.want {
			t.Errorf("connections %v: got %d, %v", tc.v, n, err)
		}
		if err != nil && !strings.Contains(err.Error(), "transports.tcp.connections") {
			t.Errorf("error does not name the key: %v", err)
		}
	}
}

func TestWorkloadValidate(t *testing.T) {
	ok := Workload{Op: Write, BlockSize: 4096, BatchSize: 8, Threads: 2, Duration: time.Second}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for flag, mutate := range map[string]func(*Workload){
		"--operation":  func(w *Workload) { w.Op = "copy" },
		"--block-size": func(w *Workload) { w.BlockSize = 0 },
		"--batch-size": func(w *Workload) { w.BatchSize = 0 },
		"--threads":    func(w *Workload) { w.Threads = -1 },
		"--duration":   func(w *Workload) { w.Duration = 0 },
		"--warmup":     func(w *Workload) { w.Warmup = -time.Second },
	} {
		w := ok
		mutate(&w)
		if err := w.Validate(); err == nil || !strings.HasPrefix(err.Error(), flag+" ") {
			t.Errorf("%s: got %v", flag, err)
		}
	}
	if _, err := ParseOperation("Write"); err != nil {
		t.Error(err)
	}
	if _, err := ParseOperation("copy"); err == nil || !strings.Contains(err.Error(), "read or write") {
		t.Errorf("ParseOperation(copy): %v", err)
	}
}

// TestRawBaseline runs the raw sockets both ways and checks the bytes
// really arrive where the layout says.
func TestRawBaseline(t *testing.T) {
	checkGoroutines(t)
	const bs, buf = 4096, 64 << 10 // 16 blocks: batches wrap around
	r, err := NewRaw(RawOptions{Conns: 3, BufferSize: buf})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.Connections() != 3 {
		t.Fatalf("%d connections", r.Connections())
	}
	ctx := context.Background()

	fillPattern(r.cbuf, 0, 7)
	w := Workload{Op: Write, BlockSize: bs, BatchSize: 5, Threads: 2, Duration: 50 * time.Millisecond, Warmup: 10 * time.Millisecond}
	res, moved, err := r.Run(ctx, w, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	checkResult(t, res)
	if res.Mode != "raw, server in this process" || res.Connections != 3 || res.PluginCPU != 0 || res.PluginPIDs != nil {
		t.Fatalf("raw result: %+v", res)
	}
	// What the run moved (a loaded machine may run fewer batches than
	// wrap around the buffer) holds the pattern; the rest was not touched.
	if moved.Total() < w.BatchSize {
		t.Fatalf("WRITE moved blocks %s: fewer than one batch", moved)
	}
	if v := verifyBlocks(r.srv.buf, bs, moved, 7, "server"); !v.OK {
		t.Fatalf("WRITE: server buffer after the run (blocks %s): %+v", moved, v)
	}

	fillPattern(r.srv.buf, 0, 9)
	w.Op, w.BatchSize, w.Threads = Read, 5, 3 // 5 blocks per thread
	res, moved, err = r.Run(ctx, w, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	checkResult(t, res)
	if moved.Total() < w.BatchSize || moved.Total() > 15 { // 3 threads x 5 blocks
		t.Fatalf("READ moved blocks %s", moved)
	}
	if v := verifyBlocks(r.cbuf, bs, moved, 9, "client"); !v.OK {
		t.Fatalf("READ: client buffer after the run (blocks %s): %+v", moved, v)
	}

	w.BlockSize = 2 * buf
	if _, _, err := r.Run(ctx, w, nil, ""); err == nil || !strings.Contains(err.Error(), "--block-size") {
		t.Fatalf("block larger than the buffer: %v", err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := NewRaw(RawOptions{Conns: 0, BufferSize: buf}); err == nil {
		t.Fatal("NewRaw(0 connections) worked")
	}
}

// TestRawServerProcess runs the baseline against its server process
// (kvconnect bench --raw-server): what is written comes back on READ.
func TestRawServerProcess(t *testing.T) {
	checkGoroutines(t)
	const bs, buf = 4096, 64 << 10
	argv := append(rawServerCommand(t), "--buffer-size", strconv.Itoa(buf))
	r, err := NewRaw(RawOptions{Conns: 2, BufferSize: buf, ServerCommand: argv})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	pid := r.ServerPID()
	if pid <= 0 {
		t.Fatal("no server process")
	}
	ctx := context.Background()
	fillPattern(r.cbuf, 0, 11)
	// One thread, one batch the size of the buffer: any batch the WRITE
	// run completed wrote every block, and the READ reads them all back.
	w := Workload{Op: Write, BlockSize: bs, BatchSize: buf / bs, Threads: 1, Duration: 50 * time.Millisecond}
	res, moved, err := r.Run(ctx, w, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	checkResult(t, res)
	if res.Mode != "raw, server process" || len(res.PluginPIDs) != 1 || res.PluginPIDs[0] != pid {
		t.Fatalf("raw with a server process: %+v", res)
	}
	if all := (Blocks{{0, buf / bs}}); moved.String() != all.String() {
		t.Fatalf("WRITE moved blocks %s, want %s", moved, all)
	}
	clear(r.cbuf)
	w.Op = Read
	if res, moved, err = r.Run(ctx, w, nil, ""); err != nil {
		t.Fatal(err)
	}
	checkResult(t, res)
	if v := verifyBlocks(r.cbuf, bs, moved, 11, "client"); !v.OK || v.Checked != buf/bs {
		t.Fatalf("what was written did not come back: %+v", v)
	}
	if err := r.Close(); err != nil {
		t.Fatalf("server process: %v", err)
	}
	if _, err := NewRaw(RawOptions{Conns: 1, BufferSize: buf, ServerCommand: []string{"/nonexistent/kvconnect"}}); err == nil {
		t.Fatal("a missing server binary worked")
	}
}

func checkResult(t *testing.T, r Result) {
	t.Helper()
	if r.Bytes == 0 || r.Ops == 0 || r.Batches == 0 || r.GBps <= 0 || r.OpsPerSec <= 0 || r.Seconds <= 0 {
		t.Fatalf("nothing measured: %+v", r)
	}
	if r.Bytes != r.Ops*uint64(r.BlockSize) || r.Ops != r.Batches*uint64(r.BatchSize) {
		t.Fatalf("bytes, ops and batches disagree: %+v", r)
	}
	if r.LatencyP50 <= 0 || r.LatencyP50 > r.LatencyP99 || r.LatencyP99 > r.LatencyMax {
		t.Fatalf("latency p50 %v p99 %v max %v", r.LatencyP50, r.LatencyP99, r.LatencyMax)
	}
	if r.HostCPU < 0 || r.PluginCPU < 0 || r.Unit != Unit {
		t.Fatalf("CPU or unit: %+v", r)
	}
}

// TestPairVerify runs WRITE and READ between two nodes (plugins) and
// checks verification end to end, including a damaged block, with only
// the initiator's ops.
func TestPairVerify(t *testing.T) {
	checkGoroutines(t)
	ctx := context.Background()
	cfg := connector.Config{PluginDir: tcpPluginDir(t)}
	const bs = 16 << 10
	p, err := StartPair(ctx, cfg, 1<<20, nil...)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if p.Mode() != "plugin" || len(p.PluginPIDs()) != 2 {
		t.Fatalf("mode %q, plugin pids %v", p.Mode(), p.PluginPIDs())
	}
	v := &Verifier{Initiator: p.Initiator, Peer: p.Peer, Op: Write, Seed: 5, BlockSize: bs, CorruptBlock: -1}
	if err := v.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	w := Workload{Op: Write, BlockSize: bs, BatchSize: 8, Threads: 2, Duration: 50 * time.Millisecond}
	res, blocks, err := Run(ctx, RunInput{Initiator: p.Initiator, Peer: p.Peer, Workload: w, PIDs: p.PluginPIDs()})
	if err != nil {
		t.Fatal(err)
	}
	checkResult(t, res)
	if res.Transport != "tcp" || res.Mode != "plugin" || blocks.Total() < 8 || blocks.Total() > 64 {
		t.Fatalf("transport %s mode %s blocks %s", res.Transport, res.Mode, blocks)
	}
	// The measured batches, and only they, show in the ring's counts (the
	// verifier's batches before the run do not), on the host's side and
	// on the plugin's, which took each once.
	if p.Initiator.C.Status().Transports[0].DataPath == "ring" {
		if g := res.Ring; g == nil || g.Batches != res.Batches {
			t.Fatalf("ring counts %+v for %d measured batches", g, res.Batches)
		}
		if pg := res.Ring.Plugin; pg == nil || pg.ClaimedBySpinner+pg.ClaimedBySleeper+pg.ClaimedByStandby != res.Batches {
			t.Fatalf("the plugin's ring counts %+v for %d measured batches", pg, res.Batches)
		}
	} else if res.Ring != nil {
		t.Fatalf("ring counts %+v without a ring", res.Ring)
	}
	r, err := v.Check(ctx, blocks)
	if err != nil || !r.OK || r.Checked != blocks.Total() {
		t.Fatalf("verify WRITE: %+v, %v", r, err)
	}
	// What the target holds is what the run wrote: the target's memory.
	if !checkPattern(p.Target.Buf.Bytes()[:bs], 0, 5) {
		t.Fatal("the target's first block does not hold the pattern the run wrote")
	}
	v.CorruptBlock = 0
	r, err = v.Check(ctx, blocks)
	if err != nil || r.OK || r.Mismatched != 1 || r.FirstBad[0] != 0 || r.Blocks != blocks.String() {
		t.Fatalf("verify WRITE with block 0 damaged: %+v, %v", r, err)
	}
	v.CorruptBlock, v.Seed = -1, 6 // the wrong seed fails every block
	if r, err := v.Check(ctx, blocks); err != nil || r.Mismatched != blocks.Total() {
		t.Fatalf("verify WRITE with the wrong seed: %+v, %v", r, err)
	}

	v = &Verifier{Initiator: p.Initiator, Peer: p.Peer, Op: Read, Seed: 5, BlockSize: bs, CorruptBlock: 3}
	if err := v.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	w.Op = Read
	res, blocks, err = Run(ctx, RunInput{Initiator: p.Initiator, Peer: p.Peer, Workload: w})
	if err != nil {
		t.Fatal(err)
	}
	checkResult(t, res)
	if r, err := v.Check(ctx, blocks); err != nil || r.OK || r.Mismatched != 1 || r.FirstBad[0] != 3 {
		t.Fatalf("verify READ with block 3 zeroed on the target: %+v, %v", r, err)
	}
	v.CorruptBlock = -1
	if err := v.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	if _, blocks, err = Run(ctx, RunInput{Initiator: p.Initiator, Peer: p.Peer, Workload: w}); err != nil {
		t.Fatal(err)
	}
	if r, err := v.Check(ctx, blocks); err != nil || !r.OK || r.By != "initiator" {
		t.Fatalf("verify READ: %+v, %v", r, err)
	}
}

// TestSuiteTable runs the suite with one round of tiny measurements and
// checks the table has every expected row and section.
func TestSuiteTable(t *testing.T) {
	checkGoroutines(t)
	o := SuiteOptions{
		Config: connector.Config{PluginDir: tcpPluginDir(t)}, Rounds: 1, Duration: 30 * time.Millisecond,
		Threads: 2, BatchSize: 4, FallbackSamples: 1, RawServer: rawServerCommand(t),
		Command: "kvconnect bench --suite",
	}
	res, err := RunSuite(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	var md bytes.Buffer
	res.WriteMarkdown(&md, true)
	out := md.String()
	for _, v := range []string{VariantRaw, VariantRaw1, VariantTCPPlugin, VariantTCPInProc} {
		for _, op := range []string{"WRITE", "READ"} {
			for _, bs := range []string{"64KiB", "1MiB"} {
				row := "| " + v + " | " + op + " | " + bs + " | **"
				if !strings.Contains(out, row) {
					t.Errorf("no row starting %q", row)
				}
			}
		}
		if _, lat, _ := strings.Cut(out, "## Single 4KiB WRITE latency"); !strings.Contains(lat, "| "+v+" | ") {
			t.Errorf("no latency row for %s", v)
		}
	}
	for _, want := range []string{
		"## Machine", "- CPU: ", "- Kernel: ", "- Go: go", "## How to reproduce", "kvconnect bench --suite",
		"| tcp plugin / raw Go TCP, WRITE 1MiB ≥ 0.85 |", "| tcp plugin, 2 processes / tcp in-process, 2 processes, READ 1MiB ≥ 0.95 |",
		"| tcp plugin / tcp in-process, both nodes in one process (loopback), for reference, READ 1MiB ≥ 0.95 |",
		"## Single 4KiB WRITE latency", "## connector.New: protocol rdma falling back to tcp", "ended on tcp",
		"| WRITE | 1MiB |", // plugin vs in-process
		"## Metrics overhead", "| WRITE 4KiB x 1/batch, 1 thread | ", "| WRITE 1MiB x 1/batch, 1 thread | ", "| WRITE 1MiB x 4/batch, 2 threads | ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	// ucx and efa: a row each, measured or saying why not.
	for _, v := range []string{VariantUCXPlugin, VariantEFAPlugin} {
		if !strings.Contains(out, "| "+v+" | – | – | not available: ") && !strings.Contains(out, "| "+v+" | WRITE | 64KiB | **") {
			t.Errorf("no row for %s", v)
		}
	}
	if len(res.MetricsOverhead) != 3 { // single 4KiB and 1MiB WRITEs, 1MiB WRITEs in batches
		t.Errorf("metrics overhead comparisons: %+v", res.MetricsOverhead)
	}
	for _, v := range []string{VariantTCPMetrics, VariantTCPMetricsOff} {
		if strings.Contains(out, "| "+v+" | WRITE |") || strings.Contains(out, "| "+v+" | READ |") {
			t.Errorf("%s has rows in the throughput table: the metrics pairs run only against each other", v)
		}
	}
	// The metrics comparison is between the two pairs that run only in it.
	for _, c := range res.MetricsCells {
		if !metricsOnly(c.Variant) {
			t.Errorf("metrics cell of %s: the on/off comparison takes pairs that run only in it", c.Variant)
		}
	}
	for _, c := range append(res.Cells, res.MetricsCells...) {
		if c.Variant == VariantRaw || c.Variant == VariantRaw1 || c.Variant == VariantTCPPlugin || c.Variant == VariantTCPMetrics || c.Variant == VariantTCPMetricsOff || c.Variant == VariantTCPInProc {
			if len(c.Results) != 1 || len(c.Errors) > 0 {
				t.Errorf("%s %s %s: %d results, errors %v", c.Variant, c.Op, units.FormatSize(uint64(c.BlockSize)), len(c.Results), c.Errors)
				continue
			}
			checkResult(t, c.Results[0])
			if r := c.Results[0]; r.HostSwitches <= 0 || (len(r.PluginPIDs) > 0 && r.PluginSwitches <= 0) {
				t.Errorf("%s %s: context switches host %d, plugins %d (pids %v): a process that waits switches", c.Variant, c.Op, r.HostSwitches, r.PluginSwitches, r.PluginPIDs)
			}
			if r := c.Results[0]; !r.hostWaitKnown || r.HostRunDelay < 0 || r.PluginRunDelay < 0 || r.VCPUIdle < 0 || r.VCPUIdle > 1 {
				t.Errorf("%s %s: run delay host %v (measured %v), plugins %v; vCPUs idle %v", c.Variant, c.Op, r.HostRunDelay, r.hostWaitKnown, r.PluginRunDelay, r.VCPUIdle)
			}
			if c.HostWaitBatch.N != 1 || c.VCPUIdle.N != 1 {
				t.Errorf("%s %s: waiting and idle not summarized: %+v, %+v", c.Variant, c.Op, c.HostWaitBatch, c.VCPUIdle)
			}
		}
	}
	// Every target row says in how many of the rounds (here one) it was met.
	if _, row, ok := strings.Cut(out, "| tcp plugin / raw Go TCP, WRITE 1MiB ≥ 0.85 |"); !ok || !strings.Contains(strings.SplitN(row, "\n", 2)[0], " of 1 |") {
		t.Errorf("the 1MiB WRITE target row does not count its rounds: %q", strings.SplitN(row, "\n", 2)[0])
	}
	if !strings.Contains(out, "| host / other context switches per batch |") || !strings.Contains(out, "| host / other context switches per op |") {
		t.Error("the report has no context switch columns")
	}
	if !strings.Contains(out, "| host / other waiting µs per batch | vCPUs idle |") {
		t.Error("the report has no waiting and idle columns")
	}
	if _, row, ok := strings.Cut(out, "| "+VariantTCPPlugin+" | WRITE | 64KiB | **"); !ok || !strings.HasSuffix(strings.SplitN(row, "\n", 2)[0], " % |") {
		t.Errorf("the tcp plugin's 64KiB WRITE row ends without the vCPUs' idle share: %q", strings.SplitN(row, "\n", 2)[0])
	}
	if res.Baseline != VariantRaw {
		t.Errorf("baseline %q", res.Baseline)
	}
	if res.Fallback.TotalMs.N != 1 || res.Fallback.EndedOn[0] != "tcp" {
		t.Errorf("fallback timing: %+v", res.Fallback)
	}
	if t.Failed() {
		t.Log(out)
	}
}

// failingBencher fails every measurement.
type failingBencher struct{}

func (failingBencher) run(context.Context, Workload, *Progress, string) (Result, error) {
	return Result{}, errors.New("wedged on purpose")
}
func (failingBencher) close() error { return nil }

// TestSuiteVariantFails checks that a variant that fails is reported and
// left out of later measurements while the others go on.
func TestSuiteVariantFails(t *testing.T) {
	checkGoroutines(t)
	o := SuiteOptions{
		Config: connector.Config{PluginDir: tcpPluginDir(t)}, Rounds: 2, Duration: 20 * time.Millisecond,
		Threads: 1, BatchSize: 2, BlockSizes: []int{4096}, Ops: []Operation{Write}, FallbackSamples: 1,
		extra: []variantSetup{{status: VariantStatus{Name: "wedged", Transport: "x", Mode: "plugin"},
			start: func(context.Context) (bencher, error) { return failingBencher{}, nil }}},
	}
	res, err := RunSuite(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	var md bytes.Buffer
	res.WriteMarkdown(&md, false)
	out := md.String()
	for _, want := range []string{
		"| wedged | WRITE | 4KiB | round 1: wedged on purpose",
		"| wedged | left out: the variant failed in round 1 (WRITE 4KiB x 2/batch, 1 thread) |",
		"| " + VariantTCPPlugin + " | WRITE | 4KiB | **",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	for _, c := range res.Cells {
		if c.Variant == VariantTCPPlugin && len(c.Results) != 2 {
			t.Errorf("tcp plugin: %d results, want 2", len(c.Results))
		}
	}
}

func TestSuiteOptionsValidate(t *testing.T) {
	o := SuiteOptions{Rounds: -1}
	o.setDefaults()
	if err := o.validate(); err == nil || !strings.Contains(err.Error(), "--rounds") {
		t.Errorf("rounds -1: %v", err)
	}
	o = SuiteOptions{BufferSize: 100 << 10}
	o.setDefaults()
	if err := o.validate(); err == nil || !strings.Contains(err.Error(), "--buffer-size") {
		t.Errorf("buffer smaller than a block: %v", err)
	}
}

func TestProgressQuietWhenPiped(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if NewProgress(w) != nil || NewProgress(&bytes.Buffer{}) != nil {
		t.Fatal("progress line on a pipe or buffer")
	}
	var p *Progress // nil is quiet and safe
	p.Set("x %d", 1)
	p.Clear()
	p.ticker(time.Millisecond, func() {})()
}

func TestLayout(t *testing.T) {
	l := newLayout(10, 3) // 3 blocks each; block 9 unused
	for th, want := range [][]uint64{{0, 1, 2, 0}, {3, 4, 5, 3}, {6, 7, 8, 6}} {
		for k, b := range want {
			if got := l.block(th, uint64(k)); got != b {
				t.Errorf("thread %d op %d: block %d, want %d", th, k, got, b)
			}
		}
	}
	if got := l.touched([]uint64{2, 5, 0}).String(); got != "0..1, 3..5" {
		t.Errorf("touched: %s", got)
	}
	if got := l.touched([]uint64{3, 3, 3}); got.String() != "0..8" || got.Total() != 9 {
		t.Errorf("touched all: %s (%d)", got, got.Total())
	}
	shared := newLayout(2, 4) // fewer blocks than threads: all share
	if shared.block(3, 5) != 1 || shared.touched([]uint64{1, 0, 0, 0}).String() != "0" {
		t.Errorf("shared layout: %d %s", shared.block(3, 5), shared.touched([]uint64{1, 0, 0, 0}))
	}
	if (Blocks{}).String() != "none" {
		t.Error("empty blocks")
	}
}
