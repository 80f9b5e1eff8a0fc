package metrics

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"sync"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
)

// processCollector is the Linux process collector: CPU time and limits
// from system calls (getrusage, getrlimit), memory from /proc/self/statm
// (one short line), open descriptors by listing /proc/self/fd, and the
// start time read once. A series whose source fails is left out of that
// scrape, as client_golang's collector does by default.
type processCollector struct {
	startOnce sync.Once
	start     float64 // seconds since the epoch; 0 when unknown
}

func newProcessCollector() prometheus.Collector { return &processCollector{} }

// Describe sends the series' descriptions.
func (c *processCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{processCPUDesc, processOpenFDsDesc, processMaxFDsDesc, processVSizeDesc, processMaxVSizeDesc, processRSSDesc, processStartDesc} {
		ch <- d
	}
}

// Collect reads the process' state now.
func (c *processCollector) Collect(ch chan<- prometheus.Metric) {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		ch <- prometheus.MustNewConstMetric(processCPUDesc, prometheus.CounterValue, timeval(ru.Utime)+timeval(ru.Stime))
	}
	if vsize, rss, err := statm(); err == nil {
		ch <- prometheus.MustNewConstMetric(processVSizeDesc, prometheus.GaugeValue, float64(vsize))
		ch <- prometheus.MustNewConstMetric(processRSSDesc, prometheus.GaugeValue, float64(rss))
	}
	if n, err := openFDs(); err == nil {
		ch <- prometheus.MustNewConstMetric(processOpenFDsDesc, prometheus.GaugeValue, float64(n))
	}
	var lim syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) == nil {
		ch <- prometheus.MustNewConstMetric(processMaxFDsDesc, prometheus.GaugeValue, float64(lim.Cur))
	}
	if syscall.Getrlimit(syscall.RLIMIT_AS, &lim) == nil {
		ch <- prometheus.MustNewConstMetric(processMaxVSizeDesc, prometheus.GaugeValue, float64(lim.Cur))
	}
	c.startOnce.Do(func() { c.start, _ = startTime() })
	if c.start > 0 {
		ch <- prometheus.MustNewConstMetric(processStartDesc, prometheus.GaugeValue, c.start)
	}
}

func timeval(tv syscall.Timeval) float64 { return float64(tv.Sec) + float64(tv.Usec)/1e6 }

// statm is the process' virtual and resident memory in bytes, from
// /proc/self/statm ("size resident shared text lib data dt", in pages).
func statm() (vsize, rss uint64, err error) {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0, 0, err
	}
	return parseStatm(b, uint64(os.Getpagesize()))
}

func parseStatm(b []byte, page uint64) (vsize, rss uint64, err error) {
	f := bytes.Fields(b)
	if len(f) < 2 {
		return 0, 0, fmt.Errorf("metrics: /proc/self/statm %q: want at least 2 fields", b)
	}
	size, err := strconv.ParseUint(string(f[0]), 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("metrics: /proc/self/statm size: %w", err)
	}
	res, err := strconv.ParseUint(string(f[1]), 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("metrics: /proc/self/statm resident: %w", err)
	}
	return size * page, res * page, nil
}

// openFDs counts the process' open file descriptors (the entries of
// /proc/self/fd, the one reading it included, as client_golang counts).
func openFDs() (int, error) {
	d, err := os.Open("/proc/self/fd")
	if err != nil {
		return 0, err
	}
	defer d.Close()
	n := 0
	for {
		names, err := d.Readdirnames(256)
		n += len(names)
		if err != nil || len(names) == 0 {
			return n, nil
		}
	}
}

// userHZ is the unit of /proc/<pid>/stat's times: USER_HZ, 100 on every
// Linux architecture Go supports (client_golang's procfs assumes it too).
const userHZ = 100

// startTime is when the process started, in seconds since the epoch: its
// start in clock ticks after boot (/proc/self/stat, field 22) plus the
// boot time (/proc/stat's btime).
func startTime() (float64, error) {
	stat, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return 0, err
	}
	ticks, err := parseStartTicks(stat)
	if err != nil {
		return 0, err
	}
	all, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	boot, err := parseBootTime(all)
	if err != nil {
		return 0, err
	}
	return float64(boot) + float64(ticks)/userHZ, nil
}

// parseStartTicks reads field 22 (starttime) of a /proc/<pid>/stat line.
// The command name, field 2, is in parentheses and may hold spaces and
// parentheses itself: fields are counted after its last ')'.
func parseStartTicks(stat []byte) (uint64, error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("metrics: /proc/self/stat: no ')' after the command name")
	}
	f := bytes.Fields(stat[i+1:])
	const field = 22 - 3 // fields after the name start at 3 (state)
	if len(f) <= field {
		return 0, fmt.Errorf("metrics: /proc/self/stat: %d fields after the command name, want more than %d", len(f), field)
	}
	v, err := strconv.ParseUint(string(f[field]), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("metrics: /proc/self/stat starttime: %w", err)
	}
	return v, nil
}

// parseBootTime reads the btime line of /proc/stat (seconds since the
// epoch).
func parseBootTime(all []byte) (uint64, error) {
	for line := range bytes.Lines(all) {
		if rest, ok := bytes.CutPrefix(line, []byte("btime ")); ok {
			v, err := strconv.ParseUint(string(bytes.TrimSpace(rest)), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("metrics: /proc/stat btime: %w", err)
			}
			return v, nil
		}
	}
	return 0, fmt.Errorf("metrics: /proc/stat has no btime line")
}
