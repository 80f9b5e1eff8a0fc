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

// selfCPU is this process's user+system CPU time (getrusage RUSAGE_SELF:
// every thread, no children).
func selfCPU() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cpuSnapshot is the CPU time used so far by this process and by plugin
// processes.
type cpuSnapshot struct {
	host    time.Duration
	plugins map[int]time.Duration
}

func snapshotCPU(pids []int) (cpuSnapshot, error) {
	s := cpuSnapshot{host: selfCPU(), plugins: make(map[int]time.Duration, len(pids))}
	for _, pid := range pids {
		d, err := processCPU(pid)
		if err != nil {
			return s, err
		}
		s.plugins[pid] = d
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
