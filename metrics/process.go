package metrics

import "github.com/prometheus/client_golang/prometheus"

// The process_* series of a node's own endpoint (metrics_address). On
// Linux they come from a collector of this package that reads what a
// scrape needs and nothing more (process_linux.go): client_golang's
// process collector parses /proc/self/stat, /proc/self/limits,
// /proc/self/net/netstat and the whole of /proc/stat (for the boot time,
// which never changes) on every scrape, about a third of a scrape's CPU
// in the node (docs/OBSERVABILITY.md). A node moving small ops on a
// 2-vCPU machine loses about as much data-path time as a scrape keeps a
// processor busy there (docs/DATAPATH-ROUNDS.md, thirty-second round).
//
// The series and their help texts are client_golang's, except the two
// network counters (process_network_receive_bytes_total and
// process_network_transmit_bytes_total), which that collector reads from
// /proc/self/net/netstat: they count the whole network namespace, not the
// process. kvconnect_initiated_bytes_total and kvconnect_served_bytes_total
// say what the node moved.

// Process series: names and help texts as client_golang's collector has
// them, so dashboards built on either work with both.
var (
	processCPUDesc      = prometheus.NewDesc("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.", nil, nil)
	processOpenFDsDesc  = prometheus.NewDesc("process_open_fds", "Number of open file descriptors.", nil, nil)
	processMaxFDsDesc   = prometheus.NewDesc("process_max_fds", "Maximum number of open file descriptors.", nil, nil)
	processVSizeDesc    = prometheus.NewDesc("process_virtual_memory_bytes", "Virtual memory size in bytes.", nil, nil)
	processMaxVSizeDesc = prometheus.NewDesc("process_virtual_memory_max_bytes", "Maximum amount of virtual memory available in bytes.", nil, nil)
	processRSSDesc      = prometheus.NewDesc("process_resident_memory_bytes", "Resident memory size in bytes.", nil, nil)
	processStartDesc    = prometheus.NewDesc("process_start_time_seconds", "Start time of the process since unix epoch in seconds.", nil, nil)
)

// NewProcessCollector returns a collector of this process' process_*
// series (see above): on Linux this package's, elsewhere client_golang's.
// It reads nothing until collected; Collect is safe for concurrent use.
func NewProcessCollector() prometheus.Collector { return newProcessCollector() }
