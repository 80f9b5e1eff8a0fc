package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/kvconnect/kvconnect/connector"
	"github.com/kvconnect/kvconnect/errdefs"
	"github.com/kvconnect/kvconnect/plugins/host"
	"github.com/kvconnect/kvconnect/units"
)

// SuiteOptions configures RunSuite. Zero fields take the defaults of
// DefaultSuiteOptions.
type SuiteOptions struct {
	// Config is the base node configuration: plugin_dir, transport options
	// (transports.tcp.connections also sets the raw baseline's connection
	// count). Protocol and fallback are set per variant.
	Config     connector.Config
	Rounds     int
	Duration   time.Duration // per measurement
	Warmup     time.Duration // before each measurement
	Threads    int
	BatchSize  int
	BlockSizes []int
	Ops        []Operation
	// BufferSize is each side's buffer; 0 means threads x batch x the
	// largest block (at most 1GiB), so no batch moves a block twice.
	BufferSize int
	// LatencyBlock is the block size of the single-op latency cell
	// (batch 1, 1 thread, WRITE).
	LatencyBlock int
	// FallbackSamples is how many times per round connector.New with
	// protocol rdma (falling back to tcp) is timed.
	FallbackSamples int
	// RawServer is the argv of the raw baseline's server process
	// (kvconnect bench --raw-server; RunSuite appends --buffer-size
	// <bytes>; see ServeRawProcess). With it the baseline has its two ends in two
	// processes, as the plugin variants do, and the raw baseline with both
	// ends in this process is shown beside it; without it, the latter is
	// the baseline.
	RawServer []string
	// MooncakeBin is a directory holding Mooncake's transfer_engine_bench:
	// the suite then runs it, unmodified, as Mooncake → Mooncake (the
	// peer to beat), Mooncake → kvconnect and kvconnect → Mooncake, each
	// with Mooncake's client connection pool off and on.
	MooncakeBin string
	// Command is the command line, for the report.
	Command  string
	Progress *Progress
	Log      *zap.Logger

	extra []variantSetup // tests add variants
}

// DefaultSuiteOptions are what make bench runs.
func DefaultSuiteOptions() SuiteOptions {
	return SuiteOptions{
		Rounds: 5, Duration: time.Second, Warmup: 200 * time.Millisecond, Threads: 4, BatchSize: 128,
		BlockSizes: []int{64 << 10, 1 << 20}, Ops: []Operation{Write, Read},
		LatencyBlock: 4 << 10, FallbackSamples: 2,
	}
}

func (o *SuiteOptions) setDefaults() {
	d := DefaultSuiteOptions()
	if o.Rounds == 0 {
		o.Rounds = d.Rounds
	}
	if o.Duration == 0 {
		o.Duration = d.Duration
	}
	if o.Threads == 0 {
		o.Threads = d.Threads
	}
	if o.BatchSize == 0 {
		o.BatchSize = d.BatchSize
	}
	if len(o.BlockSizes) == 0 {
		o.BlockSizes = d.BlockSizes
	}
	if len(o.Ops) == 0 {
		o.Ops = d.Ops
	}
	if o.LatencyBlock == 0 {
		o.LatencyBlock = d.LatencyBlock
	}
	if o.BufferSize == 0 {
		// Enough that no batch moves the same block twice (see layout),
		// within reason.
		largest := slices.Max(append([]int{o.LatencyBlock}, o.BlockSizes...))
		o.BufferSize = max(largest, min(o.Threads*o.BatchSize*largest, 1<<30))
	}
	if o.FallbackSamples == 0 {
		o.FallbackSamples = d.FallbackSamples
	}
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
}

func (o *SuiteOptions) validate() error {
	if o.Rounds < 1 || o.Rounds > 1000 {
		return fmt.Errorf("--rounds %d: must be between 1 and 1000", o.Rounds)
	}
	for _, bs := range append(append([]int(nil), o.BlockSizes...), o.LatencyBlock) {
		if bs > o.BufferSize {
			return fmt.Errorf("--buffer-size %s: smaller than the %s blocks the suite moves", units.FormatSize(uint64(o.BufferSize)), units.FormatSize(uint64(bs)))
		}
	}
	w := Workload{Op: Write, BlockSize: o.LatencyBlock, BatchSize: o.BatchSize, Threads: o.Threads, Duration: o.Duration, Warmup: o.Warmup}
	return w.Validate()
}

// Variant names.
const (
	VariantRaw       = "raw Go TCP"
	VariantRaw1      = "raw Go TCP, 1 process"
	VariantTCPPlugin = "tcp plugin"
	// VariantTCPMetrics is VariantTCPPlugin with both nodes' metrics
	// endpoints on (metrics_address), scraped every ScrapeInterval.
	VariantTCPMetrics  = "tcp plugin, metrics on"
	VariantTCPInProc   = "tcp in-process"
	VariantUCXPlugin   = "ucx plugin"
	VariantEFAPlugin   = "efa plugin"
	VariantMCtoMC      = "Mooncake → Mooncake"
	VariantMCPtoMC     = "Mooncake pooled → Mooncake"
	VariantMCtoKV      = "Mooncake → kvconnect"
	VariantMCPtoKV     = "Mooncake pooled → kvconnect"
	VariantKVtoMC      = "kvconnect → Mooncake"
	variantLatencyNote = "batch 1, 1 thread"
)

// VariantStatus says whether a variant ran.
type VariantStatus struct {
	Name      string `json:"name"`
	Transport string `json:"transport"`
	Mode      string `json:"mode"`
	Detail    string `json:"detail,omitempty"` // e.g. tls=sm
	Available bool   `json:"available"`
	Reason    string `json:"reason,omitempty"` // why not
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
	// MetricsCells are "tcp plugin" and "tcp plugin, metrics on" measured
	// against each other in interleaved slices (metricsWorkloads); apart
	// from the cells above.
	MetricsCells []*Cell `json:"metrics_cells,omitempty"`
	// MetricsOverhead compares "tcp plugin, metrics on" with "tcp plugin"
	// workload by workload (GB/s, same-round ratios); each must be at
	// least MetricsOverheadTarget.
	MetricsOverhead []Comparison `json:"metrics_overhead,omitempty"`
	// PluginVsInProcess is tcp plugin / tcp in-process per op and block
	// size (median of per-round ratios), keyed "WRITE 1MiB".
	PluginVsInProcess map[string]summary `json:"plugin_vs_in_process"`
	Fallback          FallbackTiming     `json:"fallback"`
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

// bencher runs one variant's measurements.
type bencher interface {
	run(ctx context.Context, w Workload, p *Progress, label string) (Result, error)
	close() error
}

type rawBencher struct{ r *Raw }

func (b rawBencher) run(ctx context.Context, w Workload, p *Progress, label string) (Result, error) {
	return b.r.Run(ctx, w, p, label)
}
func (b rawBencher) close() error { return b.r.Close() }

type pairBencher struct {
	p      *Pair
	detail string // the transport options that worked, for the report
}

func (b pairBencher) run(ctx context.Context, w Workload, p *Progress, label string) (Result, error) {
	r, _, err := Run(ctx, RunInput{Initiator: b.p.Initiator, Peer: b.p.Peer, Workload: w, PIDs: b.p.PluginPIDs(), Progress: p, Label: label})
	return r, err
}
func (b pairBencher) close() error { return b.p.Close() }

// TCPConnections reads transports.tcp.connections from cfg (default 4).
func TCPConnections(cfg connector.Config) (int, error) {
	v, ok := cfg.Transports["tcp"]["connections"]
	if !ok {
		return 4, nil
	}
	var n int
	var err error
	switch x := v.(type) {
	case int:
		n = x
	case int64:
		n = int(x)
	case float64:
		n = int(x)
		if float64(n) != x {
			err = errors.New("not a whole number")
		}
	case string:
		n, err = strconv.Atoi(strings.TrimSpace(x))
	default:
		err = fmt.Errorf("unexpected type %T", v)
	}
	if err != nil || n < 1 || n > 64 {
		return 0, fmt.Errorf("transports.tcp.connections = %v: must be a whole number between 1 and 64", v)
	}
	return n, nil
}

// variantSetup starts one variant, or says why it cannot run.
type variantSetup struct {
	status   VariantStatus
	required bool // the suite fails if it cannot start
	start    func(ctx context.Context) (bencher, error)
}

func (o *SuiteOptions) variants(conns int) []variantSetup {
	log := o.Log
	strict := func(protocol string, transportOpts map[string]any) connector.Config {
		cfg := withoutMetrics(o.Config)
		cfg.Protocol, cfg.Fallback = protocol, []string{}
		if transportOpts != nil {
			ts := make(map[string]map[string]any, len(cfg.Transports)+1)
			for k, v := range cfg.Transports {
				ts[k] = v
			}
			merged := map[string]any{}
			for k, v := range cfg.Transports[protocol] {
				merged[k] = v
			}
			for k, v := range transportOpts {
				merged[k] = v
			}
			ts[protocol] = merged
			cfg.Transports = ts
		}
		return cfg
	}
	nodeOpts := func(extra ...connector.Option) []connector.Option {
		return append([]connector.Option{connector.WithLogger(log), connector.WithKeepTCP(false)}, extra...)
	}
	pair := func(cfg connector.Config, want string, opts []connector.Option) func(ctx context.Context) (bencher, error) {
		return func(ctx context.Context) (bencher, error) {
			p, err := StartPair(ctx, cfg, o.BufferSize, opts...)
			if err != nil {
				return nil, err
			}
			if p.Peer.Transport() != want {
				p.Close()
				return nil, fmt.Errorf("the nodes talk over %s, not %s", p.Peer.Transport(), want)
			}
			return pairBencher{p: p}, nil
		}
	}
	raw := func(server []string) func(context.Context) (bencher, error) {
		return func(context.Context) (bencher, error) {
			r, err := NewRaw(RawOptions{Conns: conns, BufferSize: o.BufferSize, ServerCommand: server})
			if err != nil {
				return nil, err
			}
			return rawBencher{r}, nil
		}
	}
	var vs []variantSetup
	if len(o.RawServer) > 0 {
		vs = append(vs, variantSetup{required: true,
			status: VariantStatus{Name: VariantRaw, Transport: "raw", Mode: "2 processes", Detail: fmt.Sprintf("%d connections; the server is a process", conns)},
			start:  raw(append(slices.Clone(o.RawServer), "--buffer-size", strconv.Itoa(o.BufferSize)))})
	}
	vs = append(vs, []variantSetup{
		{required: true, status: VariantStatus{Name: VariantRaw1, Transport: "raw", Mode: "1 process", Detail: fmt.Sprintf("%d connections; client and server in this process", conns)},
			start: raw(nil)},
		{required: true, status: VariantStatus{Name: VariantTCPPlugin, Transport: "tcp", Mode: "plugin", Detail: fmt.Sprintf("%d connections", conns)},
			start: pair(strict("tcp", nil), "tcp", nodeOpts())},
		{required: true, status: VariantStatus{Name: VariantTCPMetrics, Transport: "tcp", Mode: "plugin",
			Detail: fmt.Sprintf("%d connections; metrics_address on both nodes, each scraped every %v", conns, ScrapeInterval)},
			start: func(ctx context.Context) (bencher, error) {
				b, err := pair(withMetricsEndpoint(strict("tcp", nil)), "tcp", nodeOpts())(ctx)
				if err != nil {
					return nil, err
				}
				return newMetricsBencher(b.(pairBencher).p), nil
			}},
		{required: true, status: VariantStatus{Name: VariantTCPInProc, Transport: "tcp", Mode: "in-process", Detail: fmt.Sprintf("%d connections", conns)},
			start: pair(strict("tcp", nil), "tcp", nodeOpts(InProcessTCP()))},
	}...)
	// Transports built by others: run them when their plugin is here and
	// comes up with shared-memory / loopback-capable options.
	type alt struct {
		name, transport, key string
		values               []string
	}
	for _, a := range []alt{
		{VariantUCXPlugin, "ucx", "tls", []string{"sm", "posix,cma"}},
		{VariantEFAPlugin, "efa", "provider", []string{"tcp;ofi_rxm"}},
	} {
		v := variantSetup{status: VariantStatus{Name: a.name, Transport: a.transport, Mode: "plugin"}}
		path, _, err := host.FindPlugin(a.transport, o.Config.PluginDir)
		if err != nil {
			v.status.Reason = fmt.Sprintf("plugin binary %s%s not found", host.BinaryPrefix, a.transport)
			vs = append(vs, v)
			continue
		}
		v.status.Detail = path
		v.start = func(ctx context.Context) (bencher, error) {
			var errs []string
			for _, val := range a.values {
				b, err := pair(strict(a.transport, map[string]any{a.key: val}), a.transport, nodeOpts())(ctx)
				if err == nil {
					pb := b.(pairBencher)
					pb.detail = fmt.Sprintf("transports.%s.%s = %q", a.transport, a.key, val)
					return pb, nil
				}
				errs = append(errs, fmt.Sprintf("transports.%s.%s=%q: %s", a.transport, a.key, val, firstLine(err.Error())))
			}
			return nil, errors.New(strings.Join(errs, "; "))
		}
		vs = append(vs, v)
	}
	return append(vs, o.mooncakeVariants(strict("tcp", nil), nodeOpts())...)
}

// mooncakeVariants runs Mooncake's own bench beside kvconnect, when its
// binaries are here.
func (o *SuiteOptions) mooncakeVariants(tcpCfg connector.Config, opts []connector.Option) []variantSetup {
	names := []string{VariantMCtoMC, VariantMCPtoMC, VariantMCtoKV, VariantMCPtoKV, VariantKVtoMC}
	if o.MooncakeBin == "" {
		var vs []variantSetup
		for _, n := range names {
			vs = append(vs, variantSetup{status: VariantStatus{Name: n, Transport: "tcp", Mode: "Mooncake TE",
				Reason: "no Mooncake binaries: set KVCONNECT_MOONCAKE_BIN (or --mooncake-bin) to the directory holding transfer_engine_bench"}})
		}
		return vs
	}
	pool := []string{"MC_TCP_ENABLE_CONNECTION_POOL=1"}
	bin := mooncakeBench(o.MooncakeBin)
	againstMooncake := func(env []string) func(ctx context.Context) (bencher, error) {
		return func(ctx context.Context) (bencher, error) {
			t, err := startMooncakeTarget(ctx, o.MooncakeBin, o.BufferSize)
			if err != nil {
				return nil, err
			}
			return &mooncakeInitiator{dir: o.MooncakeBin, env: env, session: t.session, bufSize: o.BufferSize,
				targetPIDs: func() []int { return []int{t.pid()} }, stop: t.stop}, nil
		}
	}
	againstNode := func(env []string) func(ctx context.Context) (bencher, error) {
		return func(ctx context.Context) (bencher, error) {
			node, err := StartNode(ctx, tcpCfg, o.BufferSize, opts...)
			if err != nil {
				return nil, err
			}
			return &mooncakeInitiator{dir: o.MooncakeBin, env: env, session: node.C.SessionID(), bufSize: o.BufferSize,
				targetPIDs: node.PluginPIDs, stop: node.Close}, nil
		}
	}
	nodeToMooncake := func(ctx context.Context) (bencher, error) {
		t, err := startMooncakeTarget(ctx, o.MooncakeBin, o.BufferSize)
		if err != nil {
			return nil, err
		}
		node, err := StartNode(ctx, initiatorConfig(tcpCfg), o.BufferSize, opts...)
		if err != nil {
			t.stop()
			return nil, err
		}
		peer, err := node.C.Open(ctx, t.session)
		if err != nil {
			node.Close()
			t.stop()
			return nil, err
		}
		return nodeBencher{node: node, peer: peer, stop: t.stop}, nil
	}
	mode := "Mooncake TE initiator and target processes"
	return []variantSetup{
		{status: VariantStatus{Name: VariantMCtoMC, Transport: "tcp", Mode: mode, Detail: bin}, start: againstMooncake(nil)},
		{status: VariantStatus{Name: VariantMCPtoMC, Transport: "tcp", Mode: mode, Detail: bin + " with MC_TCP_ENABLE_CONNECTION_POOL=1"}, start: againstMooncake(pool)},
		{status: VariantStatus{Name: VariantMCtoKV, Transport: "tcp", Mode: "Mooncake TE initiator, kvconnect target (tcp plugin)", Detail: bin}, start: againstNode(nil)},
		{status: VariantStatus{Name: VariantMCPtoKV, Transport: "tcp", Mode: "Mooncake TE initiator, kvconnect target (tcp plugin)", Detail: bin + " with MC_TCP_ENABLE_CONNECTION_POOL=1"}, start: againstNode(pool)},
		{status: VariantStatus{Name: VariantKVtoMC, Transport: "tcp", Mode: "kvconnect initiator (tcp plugin), Mooncake TE target", Detail: bin}, start: nodeToMooncake},
	}
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " ..."
	}
	return s
}

// RunSuite measures every variant, alternating round by round.
func RunSuite(ctx context.Context, o SuiteOptions) (*SuiteResult, error) {
	o.setDefaults()
	if err := o.validate(); err != nil {
		return nil, err
	}
	conns, err := TCPConnections(o.Config)
	if err != nil {
		return nil, err
	}
	began := time.Now()
	res := &SuiteResult{Machine: DescribeMachine(), Command: o.Command, Rounds: o.Rounds, Duration: o.Duration.String(),
		Warmup: o.Warmup.String(), Threads: o.Threads, BatchSize: o.BatchSize, BufferSize: o.BufferSize, Conns: conns,
		Unit: Unit, PluginVsInProcess: map[string]summary{}}

	// Start every variant once; they stay up for the whole suite.
	type running struct {
		idx int
		b   bencher
	}
	setups := append(o.variants(conns), o.extra...)
	var live []running
	defer func() {
		for _, r := range live {
			if r.b != nil {
				r.b.close()
			}
		}
	}()
	for _, s := range setups {
		if s.start != nil {
			o.Progress.Set("starting %s", s.status.Name)
			b, err := s.start(ctx)
			if err != nil {
				if s.required {
					return nil, fmt.Errorf("%s: %w", s.status.Name, err)
				}
				s.status.Reason = firstLine(err.Error())
			} else {
				s.status.Available = true
				if pb, ok := b.(pairBencher); ok {
					if pb.detail != "" {
						s.status.Detail = pb.detail
					}
					for _, t := range pb.p.Initiator.C.Status().Transports {
						if t.Name == s.status.Transport {
							s.status.Mode = t.Mode
						}
					}
				}
				live = append(live, running{idx: len(res.Variants), b: b})
			}
		}
		res.Variants = append(res.Variants, s.status)
	}
	o.Progress.Clear()

	// Cells: every op and block size for every live variant, plus the
	// single-op latency cell.
	type key struct {
		variant string
		op      Operation
		bs      int
	}
	cells := map[key]*Cell{}
	cell := func(list *[]*Cell, v string, w Workload) *Cell {
		k := key{v, w.Op, w.BlockSize}
		if w.BatchSize == 1 {
			k.bs = -w.BlockSize
		}
		c, ok := cells[k]
		if !ok {
			c = &Cell{Variant: v, Op: w.Op, BlockSize: w.BlockSize, BatchSize: w.BatchSize, Threads: w.Threads}
			cells[k] = c
			*list = append(*list, c)
		}
		return c
	}
	var workloads []Workload
	for _, bs := range o.BlockSizes {
		for _, op := range o.Ops {
			workloads = append(workloads, Workload{Op: op, BlockSize: bs, BatchSize: o.BatchSize, Threads: o.Threads, Duration: o.Duration, Warmup: o.Warmup})
		}
	}
	// Rows in a stable order: variant by variant, then workload. The
	// metrics-on variant is measured only against tcp plugin (below).
	for _, s := range res.Variants {
		if s.Name == VariantTCPMetrics {
			continue
		}
		for _, w := range workloads {
			c := cell(&res.Cells, s.Name, w)
			if !s.Available {
				c.Errors = append(c.Errors, "not available: "+s.Reason)
			}
		}
	}
	latW := Workload{Op: Write, BlockSize: o.LatencyBlock, BatchSize: 1, Threads: 1, Duration: o.Duration, Warmup: o.Warmup}
	var off, on *running
	for i, r := range live {
		switch res.Variants[r.idx].Name {
		case VariantTCPMetrics:
			on = &live[i]
			continue
		case VariantTCPPlugin:
			off = &live[i]
		}
		cell(&res.Latency, res.Variants[r.idx].Name, latW)
	}
	metricsWs := metricsWorkloads(&o)
	metricsCell := map[[2]int]*Cell{} // [workload, on]
	if off != nil && on != nil {
		for i, w := range metricsWs {
			for k, v := range []string{VariantTCPPlugin, VariantTCPMetrics} {
				c := &Cell{Variant: v, Op: w.Op, BlockSize: w.BlockSize, BatchSize: w.BatchSize, Threads: w.Threads}
				metricsCell[[2]int{i, k}] = c
				res.MetricsCells = append(res.MetricsCells, c)
			}
		}
	}

	failed := map[int]string{} // variant -> where it failed
	measure := func(round int, r running, w Workload) {
		v := res.Variants[r.idx].Name
		list := &res.Cells
		if w.BatchSize == 1 {
			list = &res.Latency
		}
		c := cell(list, v, w)
		if where, ok := failed[r.idx]; ok {
			if len(c.Results) == 0 && len(c.Errors) == 0 {
				c.Errors = append(c.Errors, "left out: the variant failed in "+where)
			}
			return
		}
		label := fmt.Sprintf("round %d/%d  %-15s %s: ", round+1, o.Rounds, v, w)
		out, err := r.b.run(ctx, w, o.Progress, label)
		if err != nil {
			c.Errors = append(c.Errors, fmt.Sprintf("round %d: %s", round+1, firstLine(err.Error())))
			if ctx.Err() == nil {
				// A broken variant stays out of later measurements.
				failed[r.idx] = fmt.Sprintf("round %d (%s)", round+1, w)
				o.Log.Warn("benchmark variant failed; leaving it out", zap.String("variant", v), zap.Error(err))
			}
			return
		}
		out.Variant, out.Round = v, round+1
		c.Results = append(c.Results, out)
	}
	for round := range o.Rounds {
		for _, w := range append(workloads, latW) {
			for j := range live {
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				if r := live[(j+round)%len(live)]; res.Variants[r.idx].Name != VariantTCPMetrics {
					measure(round, r, w)
				}
			}
		}
		if off != nil && on != nil {
			for i, w := range metricsWs {
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				cells := [2]*Cell{metricsCell[[2]int{i, 0}], metricsCell[[2]int{i, 1}]}
				if _, bad := failed[off.idx]; bad {
					continue
				}
				if _, bad := failed[on.idx]; bad {
					continue
				}
				label := fmt.Sprintf("round %d/%d  metrics off/on %s: ", round+1, o.Rounds, w)
				results, err := measurePaired(ctx, [2]bencher{off.b, on.b}, w, o.Progress, label)
				if err != nil {
					for k, c := range cells {
						c.Errors = append(c.Errors, fmt.Sprintf("round %d: %s", round+1, firstLine(err.Error())))
						if ctx.Err() == nil {
							failed[[2]int{off.idx, on.idx}[k]] = fmt.Sprintf("round %d (%s, interleaved)", round+1, w)
						}
					}
					continue
				}
				for k, c := range cells {
					results[k].Variant, results[k].Round = c.Variant, round+1
					c.Results = append(c.Results, results[k])
				}
			}
		}
		o.Progress.Set("round %d/%d  connector.New with protocol rdma -> tcp", round+1, o.Rounds)
		timeFallback(ctx, &o, &res.Fallback)
	}
	o.Progress.Clear()
	summarizeSuite(res)
	res.Machine.LoadEnd = loadAvg()
	res.Elapsed = time.Since(began).Round(time.Second).String()
	return res, nil
}

// timeFallback times connector.New with protocol rdma, fallback [tcp], and
// connector.New with protocol tcp, FallbackSamples times each.
func timeFallback(ctx context.Context, o *SuiteOptions, f *FallbackTiming) {
	cfg := withoutMetrics(o.Config)
	cfg.Protocol, cfg.Fallback, cfg.RPCPort = "rdma", []string{"tcp"}, 0
	f.Config = "protocol: rdma, fallback: [tcp] (plugin processes)"
	if p, _, err := host.FindPlugin("rdma", cfg.PluginDir); err == nil {
		f.RDMAPlugin = p
	}
	plain := cfg
	plain.Protocol, plain.Fallback = "tcp", []string{}
	for range o.FallbackSamples {
		start := time.Now()
		c, err := connector.New(ctx, cfg, connector.WithLogger(zap.NewNop()))
		took := time.Since(start)
		if err != nil {
			f.Errors = append(f.Errors, firstLine(err.Error()))
			continue
		}
		st := c.Status()
		c.Close()
		f.samples = append(f.samples, ms(took))
		f.EndedOn = append(f.EndedOn, st.Transport)
		for _, a := range st.Attempts {
			switch {
			case a.Transport == "rdma":
				f.rdma = append(f.rdma, ms(a.Duration))
				if a.Diagnosis != nil && f.FirstStep == "" {
					f.FirstStep, f.FirstCause = a.Diagnosis.Step, firstLine(a.Diagnosis.Cause)
					if errors.Is(a.Err, errdefs.ErrPluginNotFound) {
						f.FirstCause = host.BinaryPrefix + "rdma not found"
					}
				}
			case a.Transport == "tcp" && a.OK:
				f.tcp = append(f.tcp, ms(a.Duration))
			}
		}

		start = time.Now()
		c, err = connector.New(ctx, plain, connector.WithLogger(zap.NewNop()))
		took = time.Since(start)
		if err != nil {
			f.Errors = append(f.Errors, firstLine(err.Error()))
			continue
		}
		c.Close()
		f.plain = append(f.plain, ms(took))
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// summarizeSuite computes medians and ratios.
func summarizeSuite(res *SuiteResult) {
	byKey := map[string]*Cell{}
	k := func(v string, op Operation, bs int) string { return v + "|" + string(op) + "|" + strconv.Itoa(bs) }
	for _, c := range res.Cells {
		byKey[k(c.Variant, c.Op, c.BlockSize)] = c
	}
	for _, list := range [][]*Cell{res.Cells, res.Latency, res.MetricsCells} {
		for _, c := range list {
			var gb, ops, p50, p99, hcpu, pcpu []float64
			for _, r := range c.Results {
				gb = append(gb, r.GBps)
				ops = append(ops, r.OpsPerSec)
				p50 = append(p50, r.LatencyP50)
				p99 = append(p99, r.LatencyP99)
				if r.Bytes > 0 {
					hcpu = append(hcpu, r.HostCPU/(float64(r.Bytes)/1e9))
					pcpu = append(pcpu, r.PluginCPU/(float64(r.Bytes)/1e9))
				}
			}
			c.GBps, c.OpsPerSec, c.P50us, c.P99us = summarize(gb), summarize(ops), summarize(p50), summarize(p99)
			c.HostCPUGB, c.PluginCPUG = summarize(hcpu), summarize(pcpu)
		}
	}
	ratio := func(a, b *Cell) summary {
		if a == nil || b == nil {
			return summary{}
		}
		// Pair results by round: each round measured both back to back.
		base := map[int]float64{}
		for _, r := range b.Results {
			base[r.Round] = r.GBps
		}
		var rs []float64
		for _, r := range a.Results {
			if g := base[r.Round]; g > 0 {
				rs = append(rs, r.GBps/g)
			}
		}
		return summarize(rs)
	}
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
		if c.Variant == VariantTCPPlugin {
			in := byKey[k(VariantTCPInProc, c.Op, c.BlockSize)]
			if in != nil && len(in.Errors) == 0 && len(c.Errors) == 0 {
				res.PluginVsInProcess[cellName(c.Op, c.BlockSize)] = ratio(c, in)
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
