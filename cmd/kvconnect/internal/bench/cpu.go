package bench

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// userHZ is the unit of the utime/stime fields of /proc/<pid>/stat
// (sysconf(_SC_CLK_TCK)); Linux fixes it at 100 for user space on every
// architecture, and reading it otherwise would need cgo.
const userHZ = 100

// processCPU is the user+system CPU time process pid has used, from
// /proc/<pid>/stat (in 1/userHZ s ticks).
func processCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, fmt.Errorf("bench: CPU time of process %d: %w", pid, err)
	}
	return parseStatCPU(string(b))
}

// parseStatCPU reads utime and stime (fields 14 and 15) from a
// /proc/<pid>/stat line. The command name (field 2) is in parentheses and
// may hold spaces, so fields are counted after the last ')'.
func parseStatCPU(stat string) (time.Duration, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("bench: malformed /proc stat line %.40q", stat)
	}
	f := strings.Fields(stat[i+1:]) // f[0] is field 3 (state)
	if len(f) < 13 {
		return 0, fmt.Errorf("bench: /proc stat line has %d fields after the command name; want at least 13", len(f))
	}
	var ticks uint64
	for _, s := range f[11:13] {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("bench: /proc stat CPU field %q: %w", s, err)
		}
		ticks += v
	}
	return time.Duration(ticks) * time.Second / userHZ, nil
}

// selfUsage is this process's user+system CPU time and context switches
// so far (getrusage RUSAGE_SELF: every thread, exited ones included).
func selfUsage() (time.Duration, int64) {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0, 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), ru.Nvcsw + ru.Nivcsw
}

// processSwitches is how many context switches (voluntary: the thread
// slept; involuntary: it was preempted) the threads of process pid have
// made so far, summed over /proc/<pid>/task/*/status. A thread that has
// exited no longer counts; Go runtimes and Mooncake's threads rarely exit
// during a run. A thread that exits while it is being read is skipped.
func processSwitches(pid int) (int64, error) {
	return sumThreads(pid, "status", "context switches", parseStatusSwitches)
}

// sumThreads sums parse over one /proc/<pid>/task/<tid>/<file> per
// thread of process pid; what names the figure in errors. A thread that
// exits while it is being read is skipped.
func sumThreads[T int64 | time.Duration](pid int, file, what string, parse func(string) (T, error)) (T, error) {
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return 0, fmt.Errorf("bench: %s of process %d: %w", what, pid, err)
	}
	var sum T
	for _, t := range tasks {
		b, err := os.ReadFile(dir + "/" + t.Name() + "/" + file)
		if err != nil {
			continue // the thread exited
		}
		v, err := parse(string(b))
		if err != nil {
			return 0, fmt.Errorf("bench: %s of thread %s of process %d: %w", what, t.Name(), pid, err)
		}
		sum += v
	}
	return sum, nil
}

// parseStatusSwitches reads voluntary_ctxt_switches and
// nonvoluntary_ctxt_switches from a /proc/<pid>/status text and returns
// their sum; both must be there.
func parseStatusSwitches(status string) (int64, error) {
	var sum int64
	found := 0
	for line := range strings.Lines(status) {
		key, val, ok := strings.Cut(line, ":")
		if !ok || (key != "voluntary_ctxt_switches" && key != "nonvoluntary_ctxt_switches") {
			continue
		}
		v, err := strconv.ParseInt(strings.TrimSpace(val), 10, 64)
		if err != nil || v < 0 {
			return 0, fmt.Errorf("bench: /proc status %s value %q is not a count", key, strings.TrimSpace(val))
		}
		sum += v
		found++
	}
	if found != 2 {
		return 0, fmt.Errorf("bench: /proc status has %d of voluntary_ctxt_switches and nonvoluntary_ctxt_switches; want both", found)
	}
	return sum, nil
}

// cpuSnapshot is the CPU time used, the context switches made and the
// time spent waiting for a CPU so far by this process and by plugin
// processes, and the machine's vCPU time (waiting.go).
type cpuSnapshot struct {
	host       time.Duration
	hostSw     int64
	hostWait   time.Duration
	plugins    map[int]time.Duration
	pluginSw   map[int]int64
	pluginWait map[int]time.Duration
	ticks      cpuTicks
}

func snapshotCPU(pids []int) (cpuSnapshot, error) {
	s := cpuSnapshot{plugins: make(map[int]time.Duration, len(pids)), pluginSw: make(map[int]int64, len(pids)), pluginWait: make(map[int]time.Duration, len(pids))}
	var err error
	if s.ticks, err = machineTicks(); err != nil {
		return s, err
	}
	s.host, s.hostSw = selfUsage()
	if s.hostWait, err = processRunDelay(os.Getpid()); err != nil {
		return s, err
	}
	for _, pid := range pids {
		d, err := processCPU(pid)
		if err != nil {
			return s, err
		}
		n, err := processSwitches(pid)
		if err != nil {
			return s, err
		}
		w, err := processRunDelay(pid)
		if err != nil {
			return s, err
		}
		s.plugins[pid], s.pluginSw[pid], s.pluginWait[pid] = d, n, w
	}
	return s, nil
}

// since returns the host and plugin CPU seconds used between before and s.
func (s cpuSnapshot) since(before cpuSnapshot) (host, plugins float64) {
	host = (s.host - before.host).Seconds()
	for pid, d := range s.plugins {
		plugins += (d - before.plugins[pid]).Seconds()
	}
	return host, plugins
}

// waitSince returns the time this process's threads and the plugin
// processes' waited for a CPU (runnable, not running) between before and
// s, and the share of the machine's vCPU time that was idle meanwhile.
func (s cpuSnapshot) waitSince(before cpuSnapshot) (host, plugins time.Duration, idle float64) {
	host = s.hostWait - before.hostWait
	for pid, w := range s.pluginWait {
		plugins += w - before.pluginWait[pid]
	}
	return host, plugins, s.ticks.idleShare(before.ticks)
}

// switchesSince returns the context switches this process and the plugin
// processes made between before and s.
func (s cpuSnapshot) switchesSince(before cpuSnapshot) (host, plugins int64) {
	host = s.hostSw - before.hostSw
	for pid, n := range s.pluginSw {
		plugins += n - before.pluginSw[pid]
	}
	return host, plugins
}
