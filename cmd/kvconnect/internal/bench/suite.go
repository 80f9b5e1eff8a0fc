package bench

import (
	"context"
	"fmt"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/kvconnect/kvconnect/connector"
	"github.com/kvconnect/kvconnect/transports/names"
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
	// TargetServer is the argv of a kvconnect node process (kvconnect
	// bench --mode target --hostname 127.0.0.1 ...; RunSuite appends
	// --buffer-size, --json and, for the in-process variant,
	// --in-process): with it the suite also runs the two-process variants,
	// an initiator node here and its target in that process, as deployed.
	TargetServer []string
	// FloorC is the C ping-pong binary (floor/pingpong.c): with it the
	// single-op latency table has the floor of a small op between two
	// processes on this machine.
	FloorC string
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
		BlockSizes: []int{16 << 10, 64 << 10, 1 << 20}, Ops: []Operation{Write, Read},
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
	r := &suiteRun{ctx: ctx, o: &o, cells: map[cellKey]*Cell{}, failed: map[int]string{},
		res: &SuiteResult{Machine: DescribeMachine(), Command: o.Command, Rounds: o.Rounds, Duration: o.Duration.String(),
			Warmup: o.Warmup.String(), Threads: o.Threads, BatchSize: o.BatchSize, BufferSize: o.BufferSize, Conns: conns,
			Unit: Unit, PluginVsInProcess: map[string]map[string]summary{}}}
	defer r.closeAll()
	if err := r.start(append(o.variants(conns), o.extra...)); err != nil {
		return nil, err
	}
	r.layout()
	for round := range o.Rounds {
		if err := r.round(round); err != nil {
			return nil, err
		}
	}
	o.Progress.Clear()
	summarizeSuite(r.res)
	r.res.Machine.LoadEnd = loadAvg()
	r.res.Elapsed = time.Since(began).Round(time.Second).String()
	return r.res, nil
}

// suiteRun is one RunSuite: the variants up, the cells they fill, and the
// variants that failed (left out of later measurements).
type suiteRun struct {
	ctx context.Context
	o   *SuiteOptions
	res *SuiteResult

	live   []running
	cells  map[cellKey]*Cell
	failed map[int]string // variant index -> where it failed

	workloads   []Workload // every op and block size
	latency     Workload   // the single-op latency cell's
	metricsWs   []Workload // tcp plugin with metrics off and on, interleaved
	metricsCell map[[2]int]*Cell
	off, on     *running // tcp plugin with metrics off and on, for their comparison only
}

// running is a variant that started, and its index in res.Variants.
type running struct {
	idx int
	b   bencher
}

// cellKey names a cell: latency cells have a negative block size.
type cellKey struct {
	variant string
	op      Operation
	bs      int
}

// start starts every variant once; they stay up for the whole suite. A
// required variant that cannot start fails the suite; the others say
// why not.
func (r *suiteRun) start(setups []variantSetup) error {
	for _, s := range setups {
		if s.start != nil {
			r.o.Progress.Set("starting %s", s.status.Name)
			b, err := s.start(r.ctx)
			if err != nil {
				if s.required {
					return fmt.Errorf("%s: %w", s.status.Name, err)
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
				r.live = append(r.live, running{idx: len(r.res.Variants), b: b})
			}
		}
		r.res.Variants = append(r.res.Variants, s.status)
	}
	r.o.Progress.Clear()
	return nil
}

func (r *suiteRun) closeAll() {
	for _, l := range r.live {
		if l.b != nil {
			l.b.close()
		}
	}
}

// cell returns (making it, appended to list) variant v's cell of w.
func (r *suiteRun) cell(list *[]*Cell, v string, w Workload) *Cell {
	k := cellKey{v, w.Op, w.BlockSize}
	if w.BatchSize == 1 {
		k.bs = -w.BlockSize
	}
	c, ok := r.cells[k]
	if !ok {
		c = &Cell{Variant: v, Op: w.Op, BlockSize: w.BlockSize, BatchSize: w.BatchSize, Threads: w.Threads}
		r.cells[k] = c
		*list = append(*list, c)
	}
	return c
}

// layout makes the cells in a stable order (variant by variant, then
// workload), the single-op latency cells, and the interleaved metrics
// off/on cells. The metrics-on variant is measured only against tcp
// plugin.
func (r *suiteRun) layout() {
	o, res := r.o, r.res
	for _, bs := range o.BlockSizes {
		for _, op := range o.Ops {
			r.workloads = append(r.workloads, Workload{Op: op, BlockSize: bs, BatchSize: o.BatchSize, Threads: o.Threads, Duration: o.Duration, Warmup: o.Warmup})
		}
	}
	for _, s := range res.Variants {
		if metricsOnly(s.Name) {
			continue
		}
		if s.LatencyOnly {
			continue
		}
		for _, w := range r.workloads {
			c := r.cell(&res.Cells, s.Name, w)
			if !s.Available {
				c.Errors = append(c.Errors, "not available: "+s.Reason)
			}
		}
	}
	r.latency = Workload{Op: Write, BlockSize: o.LatencyBlock, BatchSize: 1, Threads: 1, Duration: o.Duration, Warmup: o.Warmup}
	for i, l := range r.live {
		switch res.Variants[l.idx].Name {
		case VariantTCPMetrics:
			r.on = &r.live[i]
			continue
		case VariantTCPMetricsOff:
			r.off = &r.live[i]
			continue
		}
		r.cell(&res.Latency, res.Variants[l.idx].Name, r.latency)
	}
	r.metricsWs = metricsWorkloads(o)
	r.metricsCell = map[[2]int]*Cell{} // [workload, on]
	if r.off != nil && r.on != nil {
		for i, w := range r.metricsWs {
			for k, v := range []string{VariantTCPMetricsOff, VariantTCPMetrics} {
				c := &Cell{Variant: v, Op: w.Op, BlockSize: w.BlockSize, BatchSize: w.BatchSize, Threads: w.Threads}
				r.metricsCell[[2]int{i, k}] = c
				res.MetricsCells = append(res.MetricsCells, c)
			}
		}
	}
}

// round measures every workload on every live variant (starting with a
// different variant each round), the metrics off/on pairs, and the
// fallback timing.
func (r *suiteRun) round(round int) error {
	for _, w := range append(r.workloads, r.latency) {
		for j := range r.live {
			if err := r.ctx.Err(); err != nil {
				return err
			}
			l := r.live[(j+round)%len(r.live)]
			if st := r.res.Variants[l.idx]; !metricsOnly(st.Name) && (w.BatchSize == 1 || !st.LatencyOnly) {
				r.measure(round, l, w)
			}
		}
	}
	if r.off != nil && r.on != nil {
		for i, w := range r.metricsWs {
			if err := r.ctx.Err(); err != nil {
				return err
			}
			r.measureMetrics(round, i, w)
		}
	}
	r.o.Progress.Set("round %d/%d  connector.New with protocol %s -> %s", round+1, r.o.Rounds, names.RDMA, names.TCP)
	timeFallback(r.ctx, r.o, &r.res.Fallback)
	return nil
}

// metricsOnly reports whether variant runs only in the metrics on/off
// comparison (measureMetrics), not in the workloads' tables.
func metricsOnly(variant string) bool {
	return variant == VariantTCPMetrics || variant == VariantTCPMetricsOff
}

// measure runs w once on variant l; a variant that fails is left out of
// later measurements.
func (r *suiteRun) measure(round int, l running, w Workload) {
	v := r.res.Variants[l.idx].Name
	list := &r.res.Cells
	if w.BatchSize == 1 {
		list = &r.res.Latency
	}
	c := r.cell(list, v, w)
	if where, ok := r.failed[l.idx]; ok {
		if len(c.Results) == 0 && len(c.Errors) == 0 {
			c.Errors = append(c.Errors, "left out: the variant failed in "+where)
		}
		return
	}
	label := fmt.Sprintf("round %d/%d  %-15s %s: ", round+1, r.o.Rounds, v, w)
	out, err := l.b.run(r.ctx, w, r.o.Progress, label)
	if err != nil {
		c.Errors = append(c.Errors, fmt.Sprintf("round %d: %s", round+1, firstLine(err.Error())))
		if r.ctx.Err() == nil {
			r.failed[l.idx] = fmt.Sprintf("round %d (%s)", round+1, w)
			r.o.Log.Warn("benchmark variant failed; leaving it out", zap.String("variant", v), zap.Error(err))
		}
		return
	}
	out.Variant, out.Round = v, round+1
	c.Results = append(c.Results, out)
}

// measureMetrics runs metrics workload i on the tcp plugin pairs with metrics off
// and on, interleaved.
func (r *suiteRun) measureMetrics(round, i int, w Workload) {
	cells := [2]*Cell{r.metricsCell[[2]int{i, 0}], r.metricsCell[[2]int{i, 1}]}
	if _, bad := r.failed[r.off.idx]; bad {
		return
	}
	if _, bad := r.failed[r.on.idx]; bad {
		return
	}
	label := fmt.Sprintf("round %d/%d  metrics off/on %s: ", round+1, r.o.Rounds, w)
	results, err := measurePaired(r.ctx, [2]bencher{r.off.b, r.on.b}, w, r.o.Progress, label)
	if err != nil {
		for k, c := range cells {
			c.Errors = append(c.Errors, fmt.Sprintf("round %d: %s", round+1, firstLine(err.Error())))
			if r.ctx.Err() == nil {
				r.failed[[2]int{r.off.idx, r.on.idx}[k]] = fmt.Sprintf("round %d (%s, interleaved)", round+1, w)
			}
		}
		return
	}
	for k, c := range cells {
		results[k].Variant, results[k].Round = c.Variant, round+1
		c.Results = append(c.Results, results[k])
	}
}
