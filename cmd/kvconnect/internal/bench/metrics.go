package bench

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/kvconnect/kvconnect/connector"
	"github.com/kvconnect/kvconnect/metrics/metricstest"
	"github.com/kvconnect/kvconnect/units"
)

// Metrics in the benchmarks: a run reports what the initiator's own
// metrics endpoint counted (NodeMetrics), and the suite measures what
// metrics cost (the "tcp plugin, metrics on" variant, scraped while it
// runs).

// MetricSample is one series of a scrape.
type MetricSample struct {
	Name   string            `json:"name"`
	Labels map[string]string `json:"labels,omitempty"`
	Value  float64           `json:"value"`
}

// NodeMetrics is what a node's metrics endpoint answered: the transfer
// counters (kvconnect_initiated_* and kvconnect_served_*, ops and bytes)
// since the node started, warmup and verification included.
type NodeMetrics struct {
	Address string         `json:"address"` // the endpoint scraped
	Samples []MetricSample `json:"samples"`
}

// Value sums the samples of name whose labels include every pair of
// labels ("key", "value", ...).
func (m *NodeMetrics) Value(name string, labels ...string) float64 {
	var v float64
	for _, s := range m.Samples {
		if s.Name != name {
			continue
		}
		ok := true
		for i := 0; i+1 < len(labels); i += 2 {
			ok = ok && s.Labels[labels[i]] == labels[i+1]
		}
		if ok {
			v += s.Value
		}
	}
	return v
}

// transferFamilies are the families NodeMetrics keeps.
var transferFamilies = []string{"kvconnect_initiated_bytes_total", "kvconnect_initiated_ops_total", "kvconnect_served_bytes_total", "kvconnect_served_ops_total"}

// metricsURL is the /metrics URL of the address a node's Status shows;
// an unspecified host (every interface) is dialled on loopback.
func metricsURL(addr string) string {
	if host, port, err := net.SplitHostPort(addr); err == nil {
		if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
			addr = net.JoinHostPort("127.0.0.1", port)
		}
	}
	return "http://" + addr + "/metrics"
}

// ReadNodeMetrics scrapes c's metrics endpoint (metrics_address) and
// returns its transfer counters; nil when c has no endpoint.
func ReadNodeMetrics(ctx context.Context, c *connector.Connector) (*NodeMetrics, error) {
	addr := c.Status().MetricsAddress
	if addr == "" {
		return nil, nil
	}
	fams, err := metricstest.Scrape(ctx, metricsURL(addr))
	if err != nil {
		return nil, err
	}
	m := &NodeMetrics{Address: addr}
	for _, name := range transferFamilies {
		f := fams[name]
		if f == nil {
			continue
		}
		for _, s := range f.GetMetric() {
			ms := MetricSample{Name: name, Labels: map[string]string{}, Value: s.GetCounter().GetValue()}
			for _, l := range s.GetLabel() {
				ms.Labels[l.GetName()] = l.GetValue()
			}
			m.Samples = append(m.Samples, ms)
		}
	}
	sort.SliceStable(m.Samples, func(i, j int) bool { return m.Samples[i].Name < m.Samples[j].Name })
	return m, nil
}

// ScrapeInterval is how often the metrics-on variant is scraped while it
// runs: every second, 15 to 60 times what Prometheus is usually set to.
const ScrapeInterval = time.Second

// metricsBencher is a pair whose nodes have their metrics endpoints on
// (metrics_address), both scraped every ScrapeInterval of measuring time,
// as a Prometheus server would: the pace carries over from one run to the
// next, so a measurement cut into slices is scraped as often as a whole
// one.
type metricsBencher struct {
	pairBencher
	client *http.Client
	next   time.Duration // measuring time at which the next scrape is due
	ran    time.Duration // measuring time so far
}

func newMetricsBencher(p *Pair) *metricsBencher {
	return &metricsBencher{pairBencher: pairBencher{p: p}, client: &http.Client{Timeout: 5 * time.Second}}
}

func (b *metricsBencher) run(ctx context.Context, w Workload, p *Progress, label string) (Result, error) {
	urls := []string{metricsURL(b.p.Initiator.C.Status().MetricsAddress), metricsURL(b.p.Target.C.Status().MetricsAddress)}
	sctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var scrapeErr error
	began, ran, next := time.Now(), b.ran, b.next
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			wait := next - ran - time.Since(began)
			if wait > 0 {
				t := time.NewTimer(wait)
				select {
				case <-sctx.Done():
					t.Stop()
					return
				case <-t.C:
				}
			}
			for _, u := range urls {
				if _, err := metricstest.ScrapeWith(sctx, b.client, u); err != nil && sctx.Err() == nil && scrapeErr == nil {
					scrapeErr = err
				}
			}
			next += ScrapeInterval
		}
	}()
	r, err := b.pairBencher.run(ctx, w, p, label)
	stop()
	wg.Wait()
	b.ran, b.next = ran+time.Since(began), next
	if err == nil && scrapeErr != nil {
		err = fmt.Errorf("metrics scrape during the run: %w", scrapeErr)
	}
	return r, err
}

func (b *metricsBencher) close() error {
	b.client.CloseIdleConnections()
	return b.pairBencher.close()
}

// withMetricsEndpoint is cfg with the metrics endpoint on a free loopback
// port; withoutMetrics is cfg with it off.
func withMetricsEndpoint(cfg connector.Config) connector.Config {
	cfg.MetricsAddress = "127.0.0.1:0"
	return cfg
}

func withoutMetrics(cfg connector.Config) connector.Config {
	cfg.MetricsAddress = ""
	return cfg
}

// freePortMetricsAddress keeps cfg's metrics endpoint host but lets the
// kernel pick the port: for a second node on the same host.
func freePortMetricsAddress(cfg connector.Config) connector.Config {
	if cfg.MetricsAddress == "" {
		return cfg
	}
	if l, err := cfg.MetricsListenAddress(); err == nil {
		host, _, _ := net.SplitHostPort(l)
		cfg.MetricsAddress = net.JoinHostPort(host, "0")
	}
	return cfg
}

// Summary is a line for people: what the endpoint counted, by direction
// and op.
func (m *NodeMetrics) Summary() string {
	var parts []string
	for _, dir := range []string{"initiated", "served"} {
		for _, op := range []string{"write", "read"} {
			if v := m.Value("kvconnect_"+dir+"_bytes_total", "op", op, "result", "completed"); v > 0 {
				parts = append(parts, fmt.Sprintf("%s %s %.0f B", dir, op, v))
			}
		}
	}
	if len(parts) == 0 {
		parts = append(parts, "no bytes counted")
	}
	return strings.Join(parts, ", ") + " (" + metricsURL(m.Address) + ", completed ops)"
}

// MetricsSingleOpBlock is the block of the single-op cell the metrics
// on/off pair runs beside the suite's single-op latency cell (4KiB).
const MetricsSingleOpBlock = 1 << 20

// MetricsOverheadTarget is the least "metrics on / off" may be, cell by
// cell: metrics cost at most 2%.
const MetricsOverheadTarget = 0.98

// metricsWorkloads are what the metrics on/off pair is compared on:
// single 4KiB and 1MiB WRITEs (batch 1, 1 thread: where a per-batch cost
// shows most) and the suite's largest blocks in batches.
func metricsWorkloads(o *SuiteOptions) []Workload {
	single := func(bs int) Workload {
		return Workload{Op: Write, BlockSize: bs, BatchSize: 1, Threads: 1, Duration: o.Duration, Warmup: o.Warmup}
	}
	ws := []Workload{single(o.LatencyBlock)}
	if MetricsSingleOpBlock != o.LatencyBlock && MetricsSingleOpBlock <= o.BufferSize {
		ws = append(ws, single(MetricsSingleOpBlock))
	}
	return append(ws, Workload{Op: Write, BlockSize: slices.Max(o.BlockSizes), BatchSize: o.BatchSize, Threads: o.Threads, Duration: o.Duration, Warmup: o.Warmup})
}

// pairedOrder is the order of measurePaired's slices (0 off, 1 on):
// ABBA twice, so noise slower than a slice hits both alike.
var pairedOrder = []int{0, 1, 1, 0, 0, 1, 1, 0}

// measurePaired measures w on b[0] and b[1] in interleaved slices of
// w.Duration / 4 (pairedOrder), each warmed up once, and merges each
// one's slices into one Result.
func measurePaired(ctx context.Context, b [2]bencher, w Workload, p *Progress, label string) ([2]Result, error) {
	var parts [2][]Result
	slice := w
	slice.Duration = w.Duration / time.Duration(len(pairedOrder)/2)
	for i, k := range pairedOrder {
		s := slice
		if len(parts[k]) > 0 {
			s.Warmup = 0
		}
		r, err := b[k].run(ctx, s, p, fmt.Sprintf("%s%d/%d ", label, i+1, len(pairedOrder)))
		if err != nil {
			return [2]Result{}, err
		}
		parts[k] = append(parts[k], r)
	}
	return [2]Result{mergeResults(parts[0], w), mergeResults(parts[1], w)}, nil
}

// mergeResults is the slices of one measurement as one Result.
func mergeResults(rs []Result, w Workload) Result {
	m := rs[0]
	m.Bytes, m.Ops, m.Batches, m.HostCPU, m.PluginCPU, m.WarmupBytes = 0, 0, 0, 0, 0, 0
	m.HostSwitches, m.PluginSwitches = 0, 0
	m.HostRunDelay, m.PluginRunDelay, m.VCPUIdle = 0, 0, 0
	var seconds, idle float64
	var lat []time.Duration
	for _, r := range rs {
		m.Bytes += r.Bytes
		m.Ops += r.Ops
		m.Batches += r.Batches
		m.HostCPU += r.HostCPU
		m.PluginCPU += r.PluginCPU
		m.HostSwitches += r.HostSwitches
		m.PluginSwitches += r.PluginSwitches
		m.HostRunDelay += r.HostRunDelay
		m.PluginRunDelay += r.PluginRunDelay
		m.hostWaitKnown = m.hostWaitKnown && r.hostWaitKnown
		idle += r.VCPUIdle * r.Seconds
		m.WarmupBytes += r.WarmupBytes
		seconds += r.Seconds
		lat = append(lat, r.lat...)
	}
	if seconds > 0 {
		m.VCPUIdle = idle / seconds // weighted by each slice's time
	}
	m.fill(w, time.Duration(seconds*float64(time.Second)), lat)
	m.lat = nil
	return m
}

// summarizeMetricsOverhead compares the metrics-on variant with the
// metrics-off one on every workload both measured.
func summarizeMetricsOverhead(res *SuiteResult, ratio func(a, b *Cell) summary) {
	for i := 0; i+1 < len(res.MetricsCells); i += 2 {
		off, on := res.MetricsCells[i], res.MetricsCells[i+1]
		if len(on.Results) == 0 || len(off.Results) == 0 {
			continue
		}
		res.MetricsOverhead = append(res.MetricsOverhead, Comparison{Variant: on.Variant, Base: off.Variant, Op: on.Op, BlockSize: on.BlockSize,
			BatchSize: on.BatchSize, Ratio: ratio(on, off), Target: MetricsOverheadTarget})
	}
}

// findCell is the cell of variant for op, block and batch size.
func (res *SuiteResult) findCell(variant string, op Operation, bs, batch int) *Cell {
	for _, c := range res.MetricsCells {
		if c.Variant == variant && c.Op == op && c.BlockSize == bs && c.BatchSize == batch {
			return c
		}
	}
	return nil
}

// writeMetricsOverhead renders the metrics on/off comparison.
func (res *SuiteResult) writeMetricsOverhead(w io.Writer) {
	if len(res.MetricsOverhead) == 0 {
		return
	}
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p("## Metrics overhead\n\n")
	p("\"%s\" is a tcp plugin pair with both nodes' metrics endpoints on (metrics_address: every counter and histogram the connector keeps, "+
		"the tcp transport's served counts) and each endpoint scraped over HTTP every %v while it runs (the scrape asks the plugin for what it served), "+
		"15 to 60 times as often as Prometheus is usually set to. It is compared with \"%s\", a pair started the same way with metrics off; "+
		"both run only in this comparison, so both sit as idle between rounds (a pair that has just run the other workloads is faster in its next second than one that has not). "+
		"Each round measures the two on each workload in interleaved slices of a quarter of the duration "+
		"(off, on, on, off, off, on, on, off; each warmed up once), so the machine's noise hits both alike; the ratio is the median over rounds of metrics on / off GB/s "+
		"(for single ops the same as ops/s). Target: at least %.2f (at most 2%% slower).\n\n",
		VariantTCPMetrics, ScrapeInterval, VariantTCPMetricsOff, MetricsOverheadTarget)
	p("| workload | off: GB/s, p50 (median) | on: GB/s, p50 (median) | on / off (median) | min–max | met | rounds meeting it |\n|---|---:|---:|---:|---:|---|---:|\n")
	for _, c := range res.MetricsOverhead {
		on, off := res.findCell(VariantTCPMetrics, c.Op, c.BlockSize, c.BatchSize), res.findCell(VariantTCPMetricsOff, c.Op, c.BlockSize, c.BatchSize)
		cellStr := func(x *Cell) string {
			if x == nil || x.GBps.N == 0 {
				return "–"
			}
			return fmt.Sprintf("%.3f, %s", x.GBps.Median, usOrMs(x.P50us.Median))
		}
		threads := 1
		if off != nil {
			threads = off.Threads
		}
		met := "yes"
		if c.Ratio.Median < c.Target {
			met = "**no**"
		}
		p("| %s %s x %d/batch, %d thread%s | %s | %s | **%.3f** | %s | %s | %s |\n", c.Op.Upper(), units.FormatSize(uint64(c.BlockSize)), c.BatchSize,
			threads, plural(threads), cellStr(off), cellStr(on), c.Ratio.Median, rangeStr(c.Ratio, func(x float64) string { return fmt.Sprintf("%.3f", x) }), met,
			roundsMeeting(c.Ratio, func(v float64) bool { return v >= c.Target }))
	}
	p("\n")
}
