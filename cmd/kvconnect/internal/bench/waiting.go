package bench

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// A thread that is runnable but not running waits on a run queue: the
// kernel counts that time per thread (/proc/<pid>/task/<tid>/schedstat,
// its second field, "run delay"). Beside the share of the machine's
// vCPU time that was idle (/proc/stat), it tells a CPU-bound variant (it
// waits while no vCPU idles) from one whose threads the scheduler keeps
// on a busy vCPU while another idles: on the AMD EPYC VM, whose kernel
// packs wake-ups onto the vCPU that is awake (sched_vcpu_pack), a 64 KiB
// run through the tcp plugin had a thread waiting for a CPU during 92 %
// of the time one vCPU was idle (docs/DATAPATH-ROUNDS.md, nineteenth round).

// processRunDelay is the time the threads of process pid have spent
// runnable but waiting for a CPU so far, summed over
// /proc/<pid>/task/*/schedstat. A thread that exits while it is being
// read is skipped, as processSwitches does.
func processRunDelay(pid int) (time.Duration, error) {
	return sumThreads(pid, "schedstat", "run delay", parseSchedstat)
}

// parseSchedstat reads the run delay (the second of three fields: time
// on the CPU, time waiting on a run queue, both in ns, and time slices)
// from a /proc/<pid>/schedstat line.
func parseSchedstat(s string) (time.Duration, error) {
	f := strings.Fields(s)
	if len(f) != 3 {
		return 0, fmt.Errorf("bench: /proc schedstat %.40q has %d fields; want 3 (run time, run delay, slices)", s, len(f))
	}
	ns, err := strconv.ParseUint(f[1], 10, 63)
	if err != nil {
		return 0, fmt.Errorf("bench: /proc schedstat run delay %q is not a count of nanoseconds", f[1])
	}
	return time.Duration(ns), nil
}

// cpuTicks is the machine's vCPU time so far, in USER_HZ ticks: idle
// (idle and iowait) and in all.
type cpuTicks struct{ idle, total uint64 }

// machineTicks reads the first line of /proc/stat.
func machineTicks() (cpuTicks, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTicks{}, fmt.Errorf("bench: vCPU idle time: %w", err)
	}
	return parseProcStatCPU(string(b))
}

// parseProcStatCPU reads the "cpu" line of /proc/stat: user, nice,
// system, idle, iowait, irq, softirq, steal (guest and guest_nice are
// already in user and nice, so they are not added again).
func parseProcStatCPU(stat string) (cpuTicks, error) {
	line, _, _ := strings.Cut(stat, "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return cpuTicks{}, fmt.Errorf("bench: /proc/stat starts %.40q; want the \"cpu\" line with at least 8 counters", line)
	}
	var t cpuTicks
	for i, s := range f[1:9] {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return cpuTicks{}, fmt.Errorf("bench: /proc/stat cpu counter %d %q is not a count", i+1, s)
		}
		if t.total+v < t.total {
			return cpuTicks{}, fmt.Errorf("bench: /proc/stat cpu counters overflow")
		}
		t.total += v
		if i == 3 || i == 4 {
			t.idle += v
		}
	}
	return t, nil
}

// idleShare is the share of the vCPU time between before and t that was
// idle, 0 when none passed.
func (t cpuTicks) idleShare(before cpuTicks) float64 {
	if t.total <= before.total || t.idle < before.idle {
		return 0
	}
	return float64(t.idle-before.idle) / float64(t.total-before.total)
}
