package bench

import (
	"strconv"

	"github.com/kvconnect/kvconnect/units"
)

// What the suite measured, and the medians and ratios computed from it.

// VariantStatus says whether a variant ran.
type VariantStatus struct {
	Name      string `json:"name"`
	Transport string `json:"transport"`
	Mode      string `json:"mode"`
	Detail    string `json:"detail,omitempty"` // e.g. tls=sm
	Available bool   `json:"available"`
	Reason    string `json:"reason,omitempty"` // why not
	// LatencyOnly variants measure only the single-op latency workload.
	LatencyOnly bool `json:"latency_only,omitempty"`
}

// Cell is one variant's measurements of one workload, one per round.
type Cell struct {
	Variant   string    `json:"variant"`
	Op        Operation `json:"operation"`
	BlockSize int       `json:"block_size"`
	BatchSize int       `json:"batch_size"`
	Threads   int       `json:"threads"`
	Results   []Result  `json:"results"`
	Errors    []string  `json:"errors,omitempty"`
	GBps      summary   `json:"gb_per_s"`
	// Ratio is the median over rounds of this variant's GB/s divided by
	// the raw baseline's GB/s in the same round (same op and block size).
	Ratio      summary `json:"ratio_to_raw"`
	OpsPerSec  summary `json:"ops_per_s"`
	P50us      summary `json:"batch_latency_p50_us"`
	P99us      summary `json:"batch_latency_p99_us"`
	HostCPUGB  summary `json:"host_cpu_s_per_gb"`
	PluginCPUG summary `json:"plugin_cpu_s_per_gb"`
	// Context switches per batch of the host and of the other processes
	// (Result.HostSwitches, Result.PluginSwitches over Result.Batches).
	HostSwBatch  summary `json:"host_context_switches_per_batch"`
	OtherSwBatch summary `json:"other_context_switches_per_batch"`
	// Time waiting for a CPU per batch, µs, of the host (not measured for
	// a Mooncake initiator: N 0) and of the other processes
	// (Result.HostRunDelay, Result.PluginRunDelay over Result.Batches),
	// and the share of vCPU time idle (Result.VCPUIdle).
	HostWaitBatch  summary `json:"host_run_delay_us_per_batch"`
	OtherWaitBatch summary `json:"other_run_delay_us_per_batch"`
	VCPUIdle       summary `json:"vcpu_idle_share"`
}

// FallbackTiming is how long connector.New takes with protocol rdma to
// end up on tcp.
type FallbackTiming struct {
	Config string `json:"config"`
	// RDMAPlugin is the rdma plugin binary, "" when absent (then the rdma
	// attempt fails at "find plugin", faster than a real device preflight).
	RDMAPlugin string    `json:"rdma_plugin,omitempty"`
	EndedOn    []string  `json:"ended_on"`    // per sample
	FirstStep  string    `json:"first_step"`  // where the rdma attempt failed
	FirstCause string    `json:"first_cause"` // why
	TotalMs    summary   `json:"total_ms"`
	RDMAMs     summary   `json:"rdma_attempt_ms"`
	TCPMs      summary   `json:"tcp_attempt_ms"`
	PlainTCPMs summary   `json:"plain_tcp_new_ms"` // connector.New with protocol tcp, for reference
	Errors     []string  `json:"errors,omitempty"`
	samples    []float64 // total
	rdma, tcp  []float64 // attempts
	plain      []float64 // plain tcp
}

// SuiteResult is everything a suite measured.
type SuiteResult struct {
	Machine    Machine         `json:"machine"`
	Command    string          `json:"command"`
	Rounds     int             `json:"rounds"`
	Duration   string          `json:"duration_per_measurement"`
	Warmup     string          `json:"warmup"`
	Threads    int             `json:"threads"`
	BatchSize  int             `json:"batch_size"`
	BufferSize int             `json:"buffer_size"`
	Conns      int             `json:"connections"`
	Unit       string          `json:"unit"`
	Variants   []VariantStatus `json:"variants"`
	// Baseline is the variant ratios are taken to.
	Baseline string  `json:"baseline"`
	Cells    []*Cell `json:"cells"`
	Latency  []*Cell `json:"latency"`
	// MetricsCells are "tcp plugin, metrics off" and "tcp plugin, metrics on" measured
	// against each other in interleaved slices (metricsWorkloads); apart
	// from the cells above.
	MetricsCells []*Cell `json:"metrics_cells,omitempty"`
	// MetricsOverhead compares "tcp plugin, metrics on" with "tcp plugin, metrics off"
	// workload by workload (GB/s, same-round ratios); each must be at
	// least MetricsOverheadTarget.
	MetricsOverhead []Comparison `json:"metrics_overhead,omitempty"`
	// PluginVsInProcess is each plugin variant over the in-process
	// variant of its topology (inProcessOf: tcp plugin / tcp in-process,
	// and the same with two processes), per op and block size (median of
	// per-round ratios), keyed "WRITE 1MiB", then by the plugin variant.
	PluginVsInProcess map[string]map[string]summary `json:"plugin_vs_in_process"`
	Fallback          FallbackTiming                `json:"fallback"`
	// VsMooncake compares kvconnect with Mooncake's own TE in the same
	// rounds.
	VsMooncake []Comparison `json:"vs_mooncake,omitempty"`
	Elapsed    string       `json:"elapsed"`
}

// Comparison is one variant's GB/s over another's, round by round.
type Comparison struct {
	Variant   string    `json:"variant"`
	Base      string    `json:"base"`
	Op        Operation `json:"operation"`
	BlockSize int       `json:"block_size"`
	BatchSize int       `json:"batch_size,omitempty"` // metrics overhead: 1 for single ops
	Ratio     summary   `json:"ratio"`
	Target    float64   `json:"target,omitempty"` // the ratio to reach, 0 = none
}

// mooncakeComparisons are the same-run comparisons with Mooncake: kvconnect
// must never be the slow side (target 1).
var mooncakeComparisons = []struct {
	variant, base string
	target        float64
}{
	{VariantMCtoKV, VariantMCtoMC, 1},
	{VariantMCPtoKV, VariantMCPtoMC, 1},
	{VariantKVtoMC, VariantMCtoMC, 1},
	{VariantKVtoMC, VariantMCPtoMC, 1},
	{VariantTCPPlugin, VariantMCPtoMC, 0},
}

// summarizeSuite computes medians and ratios.
func summarizeSuite(res *SuiteResult) {
	byKey := map[string]*Cell{}
	k := func(v string, op Operation, bs int) string { return v + "|" + string(op) + "|" + strconv.Itoa(bs) }
	for _, c := range res.Cells {
		byKey[k(c.Variant, c.Op, c.BlockSize)] = c
	}
	for _, list := range [][]*Cell{res.Cells, res.Latency, res.MetricsCells} {
		for _, c := range list {
			var gb, ops, p50, p99, hcpu, pcpu, hsw, psw, hw, pw, idle []float64
			for _, r := range c.Results {
				gb = append(gb, r.GBps)
				ops = append(ops, r.OpsPerSec)
				p50 = append(p50, r.LatencyP50)
				p99 = append(p99, r.LatencyP99)
				if r.Bytes > 0 {
					hcpu = append(hcpu, r.HostCPU/(float64(r.Bytes)/1e9))
					pcpu = append(pcpu, r.PluginCPU/(float64(r.Bytes)/1e9))
				}
				if r.Batches > 0 {
					hsw = append(hsw, float64(r.HostSwitches)/float64(r.Batches))
					psw = append(psw, float64(r.PluginSwitches)/float64(r.Batches))
					if r.hostWaitKnown {
						hw = append(hw, r.HostRunDelay*1e6/float64(r.Batches))
					}
					pw = append(pw, r.PluginRunDelay*1e6/float64(r.Batches))
				}
				idle = append(idle, r.VCPUIdle)
			}
			c.GBps, c.OpsPerSec, c.P50us, c.P99us = summarize(gb), summarize(ops), summarize(p50), summarize(p99)
			c.HostCPUGB, c.PluginCPUG = summarize(hcpu), summarize(pcpu)
			c.HostSwBatch, c.OtherSwBatch = summarize(hsw), summarize(psw)
			c.HostWaitBatch, c.OtherWaitBatch, c.VCPUIdle = summarize(hw), summarize(pw), summarize(idle)
		}
	}
	ratio := func(a, b *Cell) summary { return pairedRatio(a, b, gbOf) }
	res.Baseline = VariantRaw1
	for _, v := range res.Variants {
		if v.Name == VariantRaw && v.Available {
			res.Baseline = VariantRaw
		}
	}
	for _, c := range res.Cells {
		if c.Variant != res.Baseline && len(c.Errors) == 0 {
			c.Ratio = ratio(c, byKey[k(res.Baseline, c.Op, c.BlockSize)])
		}
		if inproc, ok := inProcessOf[c.Variant]; ok {
			in := byKey[k(inproc, c.Op, c.BlockSize)]
			if in != nil && len(in.Errors) == 0 && len(c.Errors) == 0 {
				name := cellName(c.Op, c.BlockSize)
				if res.PluginVsInProcess[name] == nil {
					res.PluginVsInProcess[name] = map[string]summary{}
				}
				res.PluginVsInProcess[name][c.Variant] = ratio(c, in)
			}
		}
	}
	for _, cmp := range mooncakeComparisons {
		for _, c := range res.Cells {
			if c.Variant != cmp.variant {
				continue
			}
			base := byKey[k(cmp.base, c.Op, c.BlockSize)]
			if len(c.Errors) > 0 || base == nil || len(base.Errors) > 0 || len(c.Results) == 0 {
				continue
			}
			res.VsMooncake = append(res.VsMooncake, Comparison{Variant: cmp.variant, Base: cmp.base, Op: c.Op, BlockSize: c.BlockSize,
				Ratio: ratio(c, base), Target: cmp.target})
		}
	}
	summarizeMetricsOverhead(res, ratio)
	f := &res.Fallback
	f.TotalMs, f.RDMAMs, f.TCPMs, f.PlainTCPMs = summarize(f.samples), summarize(f.rdma), summarize(f.tcp), summarize(f.plain)
}

func cellName(op Operation, bs int) string { return op.Upper() + " " + units.FormatSize(uint64(bs)) }
