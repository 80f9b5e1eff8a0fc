package soak

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/kvconnect/kvconnect/units"
)

// Report is what a soak run did and found.
type Report struct {
	Duration  time.Duration
	Seed      uint64
	Auth      bool
	Network   string
	Started   time.Time
	Ended     time.Time
	Bytes     uint64 // moved by ops that succeeded (writes and reads)
	OpsOK     uint64
	Verified  uint64 // blocks written, read back and compared equal
	Corrupted uint64 // blocks read back different from what was written: must be 0
	// Discarded counts cycles not compared because their target restarted
	// in between (its memory is new).
	Discarded      uint64
	CorruptDetails []string
	Failed         map[string]uint64 // ops failed, by error kind
	FailedExamples map[string]string
	Faults         []FaultStats
	// Rounds counts the fault rounds completed: in each, every kind of
	// fault was injected once, in random order.
	Rounds        int
	Hostile       map[string]int
	HostileLanded uint64 // writes without the secret a node accepted: must be 0
	Recovered     bool   // every target verified blocks again after the last fault
	Problems      []string
	Leaks         Leaks
}

// OK reports whether the run met its guarantees: no corrupted block, no
// hostile write landed, every target recovered, nothing leaked, no
// problem shutting down.
func (r *Report) OK() bool {
	return r.Corrupted == 0 && r.HostileLanded == 0 && r.Recovered && r.Leaks.Zero() && len(r.Problems) == 0 && r.Verified > 0
}

// Markdown renders the report.
func (r *Report) Markdown() string {
	var b strings.Builder
	p := func(f string, a ...any) { fmt.Fprintf(&b, f, a...) }
	verdict := "PASS"
	if !r.OK() {
		verdict = "FAIL"
	}
	secs := r.Ended.Sub(r.Started).Seconds()
	p("### Soak report: %s\n\n", verdict)
	p("- faults injected for %v (run %.0f s in all), %d full rounds (every kind once per round, random order, 1-3 s apart), seed %d, auth %v\n", r.Duration, secs, r.Rounds, r.Seed, onOff(r.Auth))
	p("- network: %s\n", r.Network)
	p("- workload: %d workers per target, each writing %d blocks of %s per batch to its own slice of the target's region and reading them back, without pause\n\n",
		workersPerTgt, blocksPerOp, units.FormatSize(blockSize))
	p("| Result | Value |\n|---|---|\n")
	p("| bytes moved | %s (%.1f MB/s) |\n", units.HumanSize(r.Bytes), float64(r.Bytes)/secs/1e6)
	p("| ops succeeded | %d |\n", r.OpsOK)
	p("| blocks verified | %d |\n", r.Verified)
	p("| **corrupted blocks** | **%d** |\n", r.Corrupted)
	p("| cycles not compared (target restarted in between) | %d |\n", r.Discarded)
	p("| hostile writes that landed | %d |\n", r.HostileLanded)
	p("| every target recovered after the last fault | %v |\n", r.Recovered)
	p("| **leaks** | **%s** |\n\n", r.Leaks)

	p("Faults (recovery: from the end of the fault to the next verified blocks on the affected target):\n\n")
	p("| Fault | Count | Recovery p50 | Recovery max | Unrecovered |\n|---|---|---|---|---|\n")
	for _, f := range r.Faults {
		p("| %s | %d | %v | %v | %d |\n", f.Kind, f.Count, f.P50().Round(time.Millisecond), f.Max().Round(time.Millisecond), f.Unrecovered)
	}
	p("\nOps failed, by reason (expected while faults are injected):\n\n| Reason | Ops | Example |\n|---|---|---|\n")
	kinds := make([]string, 0, len(r.Failed))
	for k := range r.Failed {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		p("| %s | %d | %s |\n", k, r.Failed[k], strings.ReplaceAll(truncate(r.FailedExamples[k], 200), "|", "\\|"))
	}
	p("\nHostile connections:")
	hk := make([]string, 0, len(r.Hostile))
	for k := range r.Hostile {
		hk = append(hk, k)
	}
	sort.Strings(hk)
	for _, k := range hk {
		p(" %s %d;", k, r.Hostile[k])
	}
	p("\n")
	for _, f := range r.Faults {
		for _, e := range f.Failed {
			p("\n- injecting %s failed: %s", f.Kind, e)
		}
	}
	for _, c := range r.CorruptDetails {
		p("\n- corrupted: %s", c)
	}
	for _, pr := range r.Problems {
		p("\n- problem: %s", pr)
	}
	p("\n")
	return b.String()
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
