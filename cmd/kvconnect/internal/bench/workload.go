package bench

import (
	"fmt"
	"strings"
	"time"

	"github.com/kvconnect/kvconnect/connector"
	"github.com/kvconnect/kvconnect/plugins/host"
	"github.com/kvconnect/kvconnect/units"
)

// Operation is what a run does: READ pulls the peer's blocks into local
// memory, WRITE pushes local blocks into the peer's memory.
type Operation string

// Operations.
const (
	Read  Operation = "read"
	Write Operation = "write"
)

// ParseOperation parses --operation (case-insensitive).
func ParseOperation(s string) (Operation, error) {
	switch Operation(strings.ToLower(strings.TrimSpace(s))) {
	case Read:
		return Read, nil
	case Write:
		return Write, nil
	}
	return "", fmt.Errorf("--operation %q: must be read or write", s)
}

func (o Operation) kind() connector.OpKind {
	if o == Read {
		return connector.OpRead
	}
	return connector.OpWrite
}

// Upper is READ or WRITE, as tables print it.
func (o Operation) Upper() string { return strings.ToUpper(string(o)) }

// Limits on a workload's shape.
const (
	MaxBatchSize = 1 << 16
	MaxThreads   = 1024
)

// Workload is the shape of one measurement.
type Workload struct {
	Op        Operation
	BlockSize int // bytes per op
	BatchSize int // ops per batch
	Threads   int // goroutines, each with one batch in flight
	// Duration is how long batches are submitted; the batches in flight at
	// the end are waited for and counted.
	Duration time.Duration
	// Warmup runs the same workload, unmeasured, before Duration.
	Warmup time.Duration
}

// Validate checks the workload and names the flag at fault.
func (w Workload) Validate() error {
	switch {
	case w.Op != Read && w.Op != Write:
		return fmt.Errorf("--operation %q: must be read or write", w.Op)
	case w.BlockSize < 1 || w.BlockSize > connector.MaxRegionSize:
		return fmt.Errorf("--block-size %d: must be between 1 byte and %s", w.BlockSize, units.FormatSize(connector.MaxRegionSize))
	case w.BatchSize < 1 || w.BatchSize > MaxBatchSize:
		return fmt.Errorf("--batch-size %d: must be between 1 and %d", w.BatchSize, MaxBatchSize)
	case w.Threads < 1 || w.Threads > MaxThreads:
		return fmt.Errorf("--threads %d: must be between 1 and %d", w.Threads, MaxThreads)
	case w.Duration <= 0:
		return fmt.Errorf("--duration %v: must be positive, e.g. 10s", w.Duration)
	case w.Warmup < 0:
		return fmt.Errorf("--warmup %v: must not be negative", w.Warmup)
	}
	return nil
}

// String describes the workload for people: "WRITE 64KiB x 128/batch, 4 threads".
func (w Workload) String() string {
	return fmt.Sprintf("%s %s x %d/batch, %d thread%s", w.Op.Upper(), units.FormatSize(uint64(w.BlockSize)), w.BatchSize, w.Threads, plural(w.Threads))
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// Unit is how every throughput in this package is expressed.
const Unit = "GB/s (1 GB = 1e9 B)"

// Result is one measurement. Throughputs are in GB/s with 1 GB = 1e9 B.
type Result struct {
	Variant     string  `json:"variant,omitempty"`
	Round       int     `json:"round,omitempty"` // in a suite
	Transport   string  `json:"transport"`
	Mode        string  `json:"mode"` // plugin, in-process or raw
	Peer        string  `json:"peer,omitempty"`
	Operation   string  `json:"operation"`
	BlockSize   int     `json:"block_size"`
	BatchSize   int     `json:"batch_size"`
	Threads     int     `json:"threads"`
	Connections int     `json:"connections,omitempty"`
	Seconds     float64 `json:"seconds"` // wall time measured
	Bytes       uint64  `json:"bytes"`
	// WarmupBytes were moved by the warmup, before the measurement.
	WarmupBytes uint64  `json:"warmup_bytes,omitempty"`
	Ops         uint64  `json:"ops"`
	Batches     uint64  `json:"batches"`
	GBps        float64 `json:"gb_per_s"`
	Unit        string  `json:"unit"`
	OpsPerSec   float64 `json:"ops_per_s"`
	// Batch latency (submit to completion of a whole batch), microseconds.
	LatencyP50 float64 `json:"batch_latency_p50_us"`
	LatencyP99 float64 `json:"batch_latency_p99_us"`
	LatencyMax float64 `json:"batch_latency_max_us"`
	// LatencyIsMean says the three latencies are the mean batch time
	// (Mooncake's bench reports no distribution).
	LatencyIsMean bool `json:"latency_is_mean,omitempty"`
	// TimeWait is the host's TCP sockets in TIME-WAIT right after the
	// run (Mooncake variants: a connection-per-request client leaves one
	// per request).
	TimeWait int `json:"time_wait,omitempty"`
	// CPU seconds (user + system) used during the measured interval by
	// this process (both nodes' host sides in loopback mode, and the
	// transport itself when it runs in-process) and by the plugin
	// processes (both nodes' in loopback mode).
	HostCPU    float64 `json:"host_cpu_s"`
	PluginCPU  float64 `json:"plugin_cpu_s"`
	PluginPIDs []int   `json:"plugin_pids,omitempty"`
	// Context switches (voluntary and involuntary, every thread) in the
	// measured interval, of the same processes as HostCPU and PluginCPU:
	// each is a wake-up or a preemption, the cost that differs most
	// between machine types (docs/DATAPATH-ROUNDS.md, thirteenth round).
	HostSwitches   int64 `json:"host_context_switches"`
	PluginSwitches int64 `json:"plugin_context_switches"`
	// Seconds the threads of the same processes spent runnable but
	// waiting for a CPU (the kernel's run delay), and the share of the
	// machine's vCPU time that was idle, in the measured interval: a
	// variant that waits while vCPUs idle is placed badly, not short of
	// CPU (waiting.go). A Mooncake initiator's run delay is not measured
	// (its process is gone when its counters would be read): host 0.
	HostRunDelay   float64 `json:"host_run_delay_s"`
	PluginRunDelay float64 `json:"plugin_run_delay_s"`
	VCPUIdle       float64 `json:"vcpu_idle_share"`
	hostWaitKnown  bool    // HostRunDelay was measured
	// Ring is what the host side of the initiator's plugin ring counted
	// in the measured interval (connector.TransportStatus.Ring), when
	// batches took one: how the host waited for completions, and the
	// way it kept at the end. It tells a run whose small ops slept from
	// one that caught them spinning (docs/DATAPATH-ROUNDS.md).
	Ring *RingResult `json:"ring,omitempty"`
	// Verify is set when --verify was given.
	Verify *VerifyResult `json:"verify,omitempty"`
	// Metrics is what the initiator's metrics endpoint counted after the
	// run (verification included), when it has one (metrics_address).
	Metrics *NodeMetrics `json:"metrics,omitempty"`

	lat []time.Duration // the batch latencies, sorted (Run), for merging slices
}

// RingResult is a plugin ring's counts over a measured interval.
type RingResult struct {
	Batches        uint64 `json:"batches"`
	CaughtSpinning uint64 `json:"caught_spinning"`
	Slept          uint64 `json:"slept"`
	Spinning       bool   `json:"spinning"` // at the end
	// Plugin is the plugin's side over the same interval: who took the
	// batches from the submission queue. Nil when the plugin could not
	// tell (one built before the call, or the call failed).
	Plugin *PluginRingResult `json:"plugin,omitempty"`
}

// PluginRingResult counts the batches a plugin's ring spinner (no
// wake-up), sleeper and standby (each woken) took.
type PluginRingResult struct {
	ClaimedBySpinner uint64 `json:"claimed_by_spinner"`
	ClaimedBySleeper uint64 `json:"claimed_by_sleeper"`
	ClaimedByStandby uint64 `json:"claimed_by_standby"`
}

// addPlugin sets r's plugin side from the plugin's counts before and
// after, leaving it nil when either is missing or went backwards (a
// restarted plugin counts from zero). A nil r stays nil.
func (r *RingResult) addPlugin(before, after *host.PluginRingStats) {
	if r == nil || before == nil || after == nil || after.ClaimedBySpinner < before.ClaimedBySpinner ||
		after.ClaimedBySleeper < before.ClaimedBySleeper || after.ClaimedByStandby < before.ClaimedByStandby {
		return
	}
	r.Plugin = &PluginRingResult{ClaimedBySpinner: after.ClaimedBySpinner - before.ClaimedBySpinner,
		ClaimedBySleeper: after.ClaimedBySleeper - before.ClaimedBySleeper, ClaimedByStandby: after.ClaimedByStandby - before.ClaimedByStandby}
}

// ringSince is the ring's counts from before to after, nil when the
// transport has no ring at either end (or a new one: a plugin restart).
func ringSince(before, after *host.RingStats) *RingResult {
	if before == nil || after == nil || after.Batches < before.Batches || after.CaughtSpinning < before.CaughtSpinning || after.Slept < before.Slept {
		return nil
	}
	return &RingResult{Batches: after.Batches - before.Batches, CaughtSpinning: after.CaughtSpinning - before.CaughtSpinning,
		Slept: after.Slept - before.Slept, Spinning: after.Spinning}
}

// fill computes the derived fields.
func (r *Result) fill(w Workload, elapsed time.Duration, lat []time.Duration) {
	r.Operation, r.BlockSize, r.BatchSize, r.Threads = string(w.Op), w.BlockSize, w.BatchSize, w.Threads
	r.Unit = Unit
	r.Seconds = elapsed.Seconds()
	if r.Seconds > 0 {
		r.GBps = float64(r.Bytes) / r.Seconds / 1e9
		r.OpsPerSec = float64(r.Ops) / r.Seconds
	}
	p50, p99, pmax := latencySummary(lat)
	r.LatencyP50, r.LatencyP99, r.LatencyMax = us(p50), us(p99), us(pmax)
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
