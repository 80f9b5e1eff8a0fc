package bench

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/kvconnect/kvconnect/units"
)

// targets are the goals of issue 7, checked against the suite's medians.
// A vsInProc target compares a plugin variant with the in-process
// variant of the same topology: with the nodes in two processes as
// deployed, and, for reference, with both nodes in one process, the only
// comparison issue 7 had. In that one the in-process baseline never
// leaves its process and keeps both vCPUs busy, where every variant
// whose data crosses processes leaves some idle (raw Go TCP too), so it
// says more about the machine than about the plugin (docs/DATAPATH-ROUNDS.md,
// twenty-sixth round); the loopback single-op target is kept for
// reference the same way.
var targets = []struct {
	variant  string
	op       Operation
	bs       int
	min      float64
	vsInProc bool
}{
	{VariantTCPPlugin, Write, 1 << 20, 0.85, false},
	{VariantTCPPlugin, Read, 1 << 20, 0.85, false},
	{VariantTCPPlugin, Write, 64 << 10, 0.9, false},
	{VariantTCPPlugin, Read, 64 << 10, 0.9, false},
	{VariantTCPPlugin2P, Write, 64 << 10, 0.9, false},
	{VariantTCPPlugin2P, Read, 64 << 10, 0.9, false},
	{VariantTCPPlugin2P, Write, 1 << 20, 0.95, true},
	{VariantTCPPlugin2P, Read, 1 << 20, 0.95, true},
	{VariantTCPPlugin, Write, 1 << 20, 0.95, true},
	{VariantTCPPlugin, Read, 1 << 20, 0.95, true},
}

// inProcessOf is the in-process variant a plugin variant is compared
// with: the same topology, the transport in its node's process.
var inProcessOf = map[string]string{
	VariantTCPPlugin:   VariantTCPInProc,
	VariantTCPPlugin2P: VariantTCPInProc2P,
}

func f2(x float64) string { return fmt.Sprintf("%.2f", x) }

func rangeStr(s summary, format func(float64) string) string {
	if s.N == 0 {
		return "–"
	}
	return format(s.Min) + "–" + format(s.Max)
}

func usOrMs(x float64) string {
	if x >= 10000 {
		return fmt.Sprintf("%.1f ms", x/1000)
	}
	return fmt.Sprintf("%.0f µs", x)
}

// WriteMarkdown renders the suite as markdown: machine, method, the
// throughput table with ratios to the raw baseline, plugin vs in-process,
// the targets, single-op latency and the rdma -> tcp fallback time.
func (res *SuiteResult) WriteMarkdown(w io.Writer, withMachine bool) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	if withMachine {
		m := res.Machine
		p("# %s, %d vCPUs\n\n", m.CPUType(), m.Cores)
		p("Measured by `kvconnect bench --suite` (run by `make bench`) on loopback. Throughput is in %s.\n\n", Unit)
		p("## Machine\n\n")
		p("- CPU: %s, %d cores visible\n", m.CPUType(), m.Cores)
		p("- Kernel: %s\n", m.Kernel)
		p("- Go: %s\n", m.Go)
		if m.Pages != "" {
			p("- Pages: %s\n", m.Pages)
		}
		if m.TCP != "" {
			p("- TCP congestion control: %s (net.ipv4.tcp_congestion_control, every variant's sockets; on the AMD EPYC VM BBR's pacing on loopback cost raw Go TCP and kvconnect alike about a third of their throughput against cubic: docs/DATAPATH-ROUNDS.md, seventeenth round)\n", m.TCP)
		}
		p("- Date: %s (suite took %s)\n", m.Date, res.Elapsed)
		own := ""
		if res.ranMooncake() {
			own = " The end's load is mostly the suite's own: Mooncake's initiator polls with every thread while its rows run (docs/DATAPATH-ROUNDS.md, twenty-first round)."
		}
		p("- Load average (1/5/15 min): %s at the start, %s at the end.%s The machine may be shared and its speed drifts, which is why every number is a median over rounds and each ratio pairs measurements of the same round.\n\n", m.LoadStart, m.LoadEnd, own)
		p("## How to reproduce\n\n```sh\nmake bench BENCH_ROUNDS=%d\n# which runs\n%s\n```\n\n", res.Rounds, res.Command)
	}
	p("## Method\n\n")
	p("Each round measures every variant on every workload, one after another, the variants in a rotated order; "+
		"%d rounds; each measurement runs %s after a %s warmup. A workload is %d threads, each keeping one batch of %d ops in flight; "+
		"each thread's ops cycle through its own share of a %s buffer on each side, at the same offsets on both sides. "+
		"Medians over rounds; min–max is the spread. \"vs %s\" is the median over rounds of the variant's GB/s divided by the baseline's "+
		"in the same round (measured back to back, so the machine's noise hits both alike).\n\n",
		res.Rounds, res.Duration, res.Warmup, res.Threads, res.BatchSize, units.FormatSize(uint64(res.BufferSize)), res.Baseline)
	p("The raw baseline is plain Go `net.TCPConn`s on loopback, %d connections (transports.tcp.connections), with nothing of kvconnect in the path: "+
		"each batch is striped over the connections; WRITE sends a small header and the blocks (writev) and the server `io.ReadFull`s each block "+
		"into its buffer and acks the stripe with one byte; READ is the reverse; stripes of concurrent batches pipeline on each connection. "+
		"\"%s\" has its server in a separate process (`kvconnect bench --raw-server`), the same topology as the plugin variants, whose two data movers "+
		"are the two plugin processes; \"%s\" has both ends in this process, like the in-process variant. "+
		"The kvconnect variants run two nodes (two connectors) in this process; \"plugin\" means each node's transport is its own subprocess, "+
		"\"in-process\" means no subprocess. CPU is user+system seconds per GB moved: host = this process (both nodes' host sides; "+
		"the transport itself when in-process; the raw client, or both raw ends), other = both plugin processes (or the raw server process). "+
		"Context switches are every thread's, voluntary (a sleep: each one a wake-up to come) and involuntary (a preemption), of the same processes, "+
		"per batch of the variant (each Mooncake batch: its initiator as host, its target as other). "+
		"Waiting is the time the same processes' threads were runnable but not running (the kernel's run delay, summed over threads), per batch; "+
		"vCPUs idle is the share of the machine's vCPU time idle meanwhile: a variant whose threads wait while vCPUs idle is placed badly by the scheduler, "+
		"not short of CPU.\n\n",
		res.Conns, VariantRaw, VariantRaw1)

	p("## Throughput\n\n")
	p("| variant | op | block | GB/s (median) | min–max | vs %s | ops/s | batch p50 / p99 | host CPU s/GB | other CPU s/GB | host / other CPU µs per op | host / other context switches per batch | host / other waiting µs per batch | vCPUs idle |\n", res.Baseline)
	p("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	cells := slices.Clone(res.Cells)
	order := map[string]int{}
	for i, v := range res.Variants {
		order[v.Name] = i
	}
	slices.SortStableFunc(cells, func(a, b *Cell) int {
		if a.BlockSize != b.BlockSize {
			return a.BlockSize - b.BlockSize
		}
		if a.Op != b.Op {
			return strings.Compare(string(b.Op), string(a.Op)) // WRITE first
		}
		return order[a.Variant] - order[b.Variant]
	})
	avail := map[string]bool{}
	for _, v := range res.Variants {
		avail[v.Name] = v.Available
	}
	for _, c := range cells {
		name := c.Variant
		if !avail[name] {
			continue // one row each, below
		}
		if len(c.Results) == 0 {
			reason := "no result"
			if len(c.Errors) > 0 {
				reason = c.Errors[0]
			}
			p("| %s | %s | %s | %s | | | | | | | | | | |\n", name, c.Op.Upper(), units.FormatSize(uint64(c.BlockSize)), mdEscape(reason))
			continue
		}
		ratio := "1 (baseline)"
		if c.Variant != res.Baseline {
			ratio = "–"
			if c.Ratio.N > 0 {
				ratio = f2(c.Ratio.Median)
			}
		}
		note := ""
		if len(c.Errors) > 0 {
			note = " (" + mdEscape(c.Errors[0]) + ")"
		}
		plugin := f2(c.PluginCPUG.Median)
		// CPU per op: s/GB x bytes per op, in µs.
		perOp := func(sPerGB float64) string { return fmt.Sprintf("%.1f", sPerGB*float64(c.BlockSize)/1e9*1e6) }
		cpuOp := perOp(c.HostCPUGB.Median) + " / " + perOp(c.PluginCPUG.Median)
		if c.Variant == VariantRaw1 || c.Variant == VariantTCPInProc {
			plugin, cpuOp = "–", perOp(c.HostCPUGB.Median)+" / –"
		}
		p("| %s | %s | %s | **%.2f**%s | %.2f–%.2f | %s | %.0f | %s / %s | %s | %s | %s | %s | %s | %s |\n",
			name, c.Op.Upper(), units.FormatSize(uint64(c.BlockSize)), c.GBps.Median, note, c.GBps.Min, c.GBps.Max, ratio,
			c.OpsPerSec.Median, usOrMs(c.P50us.Median), usOrMs(c.P99us.Median), f2(c.HostCPUGB.Median), plugin, cpuOp, switchesCell(c), waitingCell(c), idleCell(c))
	}
	for _, v := range res.Variants {
		if !v.Available {
			p("| %s | – | – | not available: %s | | | | | | | | | | |\n", v.Name, mdEscape(v.Reason))
		}
	}
	p("\n")

	if len(res.VsMooncake) > 0 {
		p("## Against Mooncake, in the same run\n\n")
		p("Mooncake's own `transfer_engine_bench` (unmodified, TCP, P2PHANDSHAKE) ran as a variant in the same rounds, with its client " +
			"connection pool off (one TCP connection per request, Mooncake's default) and on (`MC_TCP_ENABLE_CONNECTION_POOL=1`, 4 lanes per peer). " +
			"Each row is the median over rounds of one variant's GB/s over another's, measured back to back. " +
			"kvconnect must never be the slow side: as a target of a Mooncake initiator, and as an initiator against a Mooncake target, at least as fast as Mooncake to Mooncake.\n\n")
		p("| variant | / | op | block | ratio (median) | min–max | target | met | rounds meeting it | TIME-WAIT sockets after the run (median) |\n|---|---|---|---|---:|---:|---:|---|---:|---:|\n")
		for _, c := range res.VsMooncake {
			target, met, rounds := "–", "–", "–"
			if c.Target > 0 {
				target = f2(c.Target)
				met = "yes"
				if c.Ratio.Median < c.Target {
					met = "**no**"
				}
				rounds = roundsMeeting(c.Ratio, func(v float64) bool { return v >= c.Target })
			}
			p("| %s | %s | %s | %s | **%s** | %s | %s | %s | %s | %s |\n", c.Variant, c.Base, c.Op.Upper(), units.FormatSize(uint64(c.BlockSize)),
				f2(c.Ratio.Median), rangeStr(c.Ratio, f2), target, met, rounds, timeWaitOf(res, c.Variant, c.Op, c.BlockSize))
		}
		p("\nMooncake's bench reports no latency distribution: its rows' batch latencies are the mean batch time (duration x threads / batches). "+
			"Its initiator's worker threads wait for their batches by polling without a pause (a `getTransferStatus` loop in each), so where there are fewer cores than --threads, "+
			"how fast it goes depends on how the scheduler shares the cores between those loops, its own I/O and the target's: its rows vary from round to round more than kvconnect's, "+
			"and \"rounds meeting it\" tells a coin toss (about half the rounds) from a result (all or none). "+
			"Each Mooncake run lasts at least %d s (or --duration, if longer), so that one run is more than one draw of that sharing. "+
			"It counts whole batches over whole seconds, so a run that counted fewer than %d batches is run again long enough to count that many (at most %d s; the short run served as its warmup), and that workload's later runs last as long; "+
			"each run is a new initiator process, whose first pass over its buffer (all 512 MiB of it at 1 MiB blocks) is slow on some virtual machines, so the longer runs measure its steady state more than its start. "+
			"Both targets advertise 127.0.0.1: Mooncake's initiator opens a TCP connection per request by default, and Linux reuses a port in TIME-WAIT for a new connection only on loopback "+
			"(net.ipv4.tcp_tw_reuse=2), so against a target on another address it runs out of ephemeral ports (\"Cannot assign requested address\") within seconds; "+
			"so does a cluster of such initiators against a Mooncake target (a kvconnect target answers the initiator's close with a reset, so neither side keeps TIME-WAIT). "+
			"The TIME-WAIT column counts the host's sockets in that state after each run (host-wide: those of earlier runs count until their minute is up).\n\n", mooncakeMinSecs, mooncakeMinBatches, mooncakeMaxSecs)
	}

	if len(res.PluginVsInProcess) > 0 {
		p("## tcp: subprocess plugin vs in-process\n\n")
		p("Each plugin variant over the in-process variant of the same topology, same rounds: with the two nodes in separate processes as deployed, and with both in one process (loopback).\n\n")
		p("| op | block | 2 processes: plugin / in-process (median) | min–max | one process: plugin / in-process (median) | min–max |\n|---|---|---:|---:|---:|---:|\n")
		keys := make([]string, 0, len(res.PluginVsInProcess))
		for k := range res.PluginVsInProcess {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			two, one := res.PluginVsInProcess[k][VariantTCPPlugin2P], res.PluginVsInProcess[k][VariantTCPPlugin]
			op, bs, _ := strings.Cut(k, " ")
			p("| %s | %s | %s | %s | %s | %s |\n", op, bs, ratioCell(two), rangeStr(two, f2), ratioCell(one), rangeStr(one, f2))
		}
		p("\n")
	}

	p("## Targets\n\n| target | measured: median (min–max) | met | rounds meeting it |\n|---|---:|---|---:|\n")
	for _, t := range targets {
		var got summary
		what := fmt.Sprintf("%s / %s, %s %s ≥ %.2f", t.variant, res.Baseline, t.op.Upper(), units.FormatSize(uint64(t.bs)), t.min)
		if t.vsInProc {
			reference := ""
			if t.variant == VariantTCPPlugin {
				reference = ", both nodes in one process (loopback), for reference"
			}
			what = fmt.Sprintf("%s / %s%s, %s %s ≥ %.2f", t.variant, inProcessOf[t.variant], reference, t.op.Upper(), units.FormatSize(uint64(t.bs)), t.min)
			got = res.PluginVsInProcess[cellName(t.op, t.bs)][t.variant]
		} else {
			for _, c := range res.Cells {
				if c.Variant == t.variant && c.Op == t.op && c.BlockSize == t.bs {
					got = c.Ratio
				}
			}
		}
		if got.N == 0 {
			p("| %s | not measured | – | – |\n", what)
			continue
		}
		met := "yes"
		if got.Median < t.min {
			met = "**no**"
		}
		p("| %s | %.3f (%.2f–%.2f) | %s | %s |\n", what, got.Median, got.Min, got.Max, met, roundsMeeting(got, func(v float64) bool { return v >= t.min }))
	}
	p("\n")

	if len(res.Latency) > 0 {
		bs := units.FormatSize(uint64(res.Latency[0].BlockSize))
		p("## Single %s WRITE latency (%s)\n\n", bs, variantLatencyNote)
		p("Each batch is one %s WRITE, submitted and waited for by one thread: the round trip an op pays. Medians over rounds of each round's p50 and p99.\n\n", bs)
		p("\"p50 / in-process\" and \"ops/s / Mooncake pooled\" are medians over rounds of ratios within a round (Mooncake's bench reports no distribution: its latency is the mean batch time, so its p50 is compared as that mean).\n\n")
		inproc, pooled, floor := latencyCell(res, VariantTCPInProc), latencyCell(res, VariantMCPtoMC), latencyCell(res, VariantFloorC)
		inproc2 := latencyCell(res, VariantTCPInProc2P)
		p("\"p50 / in-process\" compares a two-process variant with %s and a loopback one with %s; \"p50 / floor\" compares with %s, the floor of a small op between two processes on this machine.\n\n",
			VariantTCPInProc2P, VariantTCPInProc, VariantFloorC)
		p("| variant | p50 | p99 | ops/s | p50 / in-process | p50 / floor | ops/s / Mooncake pooled | host / other context switches per op |\n|---|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, c := range res.Latency {
			if len(c.Results) == 0 {
				p("| %s | %s | | | | | | |\n", c.Variant, mdEscape(strings.Join(c.Errors, "; ")))
				continue
			}
			mean := ""
			if len(c.Results) > 0 && c.Results[0].LatencyIsMean {
				mean = " (mean)"
			}
			base := inproc
			if strings.HasSuffix(c.Variant, ", 2 processes") || c.Variant == VariantRaw {
				base = inproc2
			}
			p("| %s | %.1f µs%s | %.1f µs%s | %.0f | %s | %s | %s | %s |\n", c.Variant, c.P50us.Median, mean, c.P99us.Median, mean, c.OpsPerSec.Median,
				ratioCell(pairedRatio(c, base, p50Of)), ratioCell(pairedRatio(c, floor, p50Of)), ratioCell(pairedRatio(c, pooled, opsOf)), switchesCell(c))
		}
		p("\n")
		if plugin2 := latencyCell(res, VariantTCPPlugin2P); plugin2 != nil {
			p("Targets, with the two nodes in separate processes as deployed:\n\n")
			p("| data-path target | measured: median (min–max) | met | rounds meeting it |\n|---|---:|---|---:|\n")
			latencyTarget(p, "tcp plugin p50 / tcp in-process p50 ≤ 1.3 (2 processes)", pairedRatio(plugin2, inproc2, p50Of), func(v float64) bool { return v <= 1.3 })
			latencyTarget(p, "tcp plugin p50 / Mooncake pooled mean latency < 1 (2 processes)", pairedRatio(plugin2, pooled, p50Of), func(v float64) bool { return v < 1 })
			latencyTarget(p, "tcp in-process p50 / Mooncake pooled mean latency < 1 (2 processes)", pairedRatio(inproc2, pooled, p50Of), func(v float64) bool { return v < 1 })
			if plugin := latencyCell(res, VariantTCPPlugin); plugin != nil {
				latencyTarget(p, "tcp plugin p50 / tcp in-process p50, both nodes in one process (loopback), for reference ≤ 1.3", pairedRatio(plugin, inproc, p50Of), func(v float64) bool { return v <= 1.3 })
			}
			p("\n")
		}
		p("Batches reach a plugin through shared-memory rings; where the remaining microseconds go, with profiles and the floor of a cross-process wake-up on this machine: [DATAPATH.md](DATAPATH.md#measurements).\n\n")
	}

	res.writeMetricsOverhead(w)

	f := res.Fallback
	p("## connector.New: protocol rdma falling back to tcp\n\n")
	if f.TotalMs.N == 0 {
		p("Not measured: %s\n\n", mdEscape(strings.Join(f.Errors, "; ")))
	} else {
		ended := strings.Join(slices.Compact(slices.Sorted(slices.Values(f.EndedOn))), ", ")
		p("`connector.New` with %s, timed %d times (alternating with the runs above), ended on %s: **median %.1f ms** (min–max %.1f–%.1f ms; target under 150 ms). ",
			f.Config, f.TotalMs.N, ended, f.TotalMs.Median, f.TotalMs.Min, f.TotalMs.Max)
		p("The rdma attempt took a median %.1f ms and the tcp attempt %.1f ms; `connector.New` with protocol tcp alone takes a median %.1f ms.\n\n",
			f.RDMAMs.Median, f.TCPMs.Median, f.PlainTCPMs.Median)
		if f.RDMAPlugin == "" {
			p("What was measured: the rdma plugin binary is absent here, so the rdma attempt failed at step \"%s\" (%s). "+
				"That is faster than a real rdma device preflight (launching the plugin and probing devices); the number will grow when the rdma plugin is built.\n\n",
				f.FirstStep, mdEscape(f.FirstCause))
		} else {
			p("What was measured: the rdma plugin (%s) ran and its attempt failed at step \"%s\" (%s): a real preflight on a host without usable RDMA devices.\n\n",
				f.RDMAPlugin, f.FirstStep, mdEscape(f.FirstCause))
		}
	}
	if len(f.Errors) > 0 && f.TotalMs.N > 0 {
		p("Some samples failed: %s\n\n", mdEscape(strings.Join(f.Errors, "; ")))
	}

	p("## Variants\n\n| variant | transport | mode | available | detail |\n|---|---|---|---|---|\n")
	for _, v := range res.Variants {
		avail := "yes"
		if !v.Available {
			avail = "not available: " + mdEscape(v.Reason)
		}
		p("| %s | %s | %s | %s | %s |\n", v.Name, v.Transport, v.Mode, avail, mdEscape(v.Detail))
	}
	p("\n")
}

func mdEscape(s string) string {
	s = strings.ReplaceAll(s, "|", `\|`)
	return strings.ReplaceAll(s, "\n", " ")
}

// latencyCell is variant's single-op latency cell, nil when it was not
// measured.
func latencyCell(res *SuiteResult, variant string) *Cell {
	for _, c := range res.Latency {
		if c.Variant == variant && len(c.Results) > 0 {
			return c
		}
	}
	return nil
}

func p50Of(r Result) float64 { return r.LatencyP50 }
func gbOf(r Result) float64  { return r.GBps }
func opsOf(r Result) float64 { return r.OpsPerSec }

// pairedRatio is the summary over rounds of f(a)/f(b), pairing the
// results of the same round; empty when either is missing or a is b.
func pairedRatio(a, b *Cell, f func(Result) float64) summary {
	if a == nil || b == nil || a == b {
		return summary{}
	}
	base := map[int]float64{}
	for _, r := range b.Results {
		base[r.Round] = f(r)
	}
	var rs []float64
	for _, r := range a.Results {
		if v := base[r.Round]; v > 0 {
			rs = append(rs, f(r)/v)
		}
	}
	return summarize(rs)
}

func ratioCell(s summary) string {
	if s.N == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f", s.Median)
}

func latencyTarget(p func(string, ...any), what string, s summary, ok func(float64) bool) {
	if s.N == 0 {
		p("| %s | not measured | – | – |\n", what)
		return
	}
	met := "yes"
	if !ok(s.Median) {
		met = "**no**"
	}
	p("| %s | %.2f (%.2f–%.2f) | %s | %s |\n", what, s.Median, s.Min, s.Max, met, roundsMeeting(s, ok))
}

// timeWaitOf is the median TIME-WAIT count after variant's runs of a
// workload, "–" when not counted.
func timeWaitOf(res *SuiteResult, variant string, op Operation, bs int) string {
	for _, c := range res.Cells {
		if c.Variant == variant && c.Op == op && c.BlockSize == bs {
			var xs []float64
			for _, r := range c.Results {
				if r.TimeWait > 0 {
					xs = append(xs, float64(r.TimeWait))
				}
			}
			if len(xs) == 0 {
				return "–"
			}
			return fmt.Sprintf("%.0f", summarize(xs).Median)
		}
	}
	return "–"
}

// waitingCell is a cell's host / other time waiting for a CPU per batch,
// "–" where not measured (a Mooncake initiator's host side; the C floor)
// or where there are no other processes.
func waitingCell(c *Cell) string {
	if c.OtherWaitBatch.N == 0 && c.HostWaitBatch.N == 0 {
		return "–"
	}
	host, other := "–", "–"
	if c.HostWaitBatch.N > 0 {
		host = fmt.Sprintf("%.0f", c.HostWaitBatch.Median)
	}
	if c.OtherWaitBatch.N > 0 && c.OtherSwBatch.Max > 0 {
		other = fmt.Sprintf("%.0f", c.OtherWaitBatch.Median)
	}
	return host + " / " + other
}

// idleCell is the median share of vCPU time idle during a cell's runs.
func idleCell(c *Cell) string {
	if c.VCPUIdle.N == 0 {
		return "–"
	}
	return fmt.Sprintf("%.0f %%", 100*c.VCPUIdle.Median)
}

// switchesCell is a cell's host / other context switches per batch, or
// "–" for a variant that measures none (the C floor: its processes are
// not followed). A measured process always switches some.
func switchesCell(c *Cell) string {
	if c.HostSwBatch.N == 0 || (c.HostSwBatch.Max == 0 && c.OtherSwBatch.Max == 0) {
		return "–"
	}
	other := fmt.Sprintf("%.1f", c.OtherSwBatch.Median)
	if c.OtherSwBatch.Max == 0 {
		other = "–"
	}
	return fmt.Sprintf("%.1f / %s", c.HostSwBatch.Median, other)
}

// ranMooncake reports whether any of Mooncake's own variants ran in the
// suite (its binaries were there and it started).
func (res *SuiteResult) ranMooncake() bool {
	for _, v := range res.Variants {
		switch v.Name {
		case VariantMCtoMC, VariantMCPtoMC, VariantMCtoKV, VariantMCPtoKV, VariantKVtoMC:
			if v.Available {
				return true
			}
		}
	}
	return false
}
