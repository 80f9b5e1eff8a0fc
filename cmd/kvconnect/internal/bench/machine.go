package bench

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kvconnect/kvconnect/internal/shm"
)

// Machine describes where a suite ran.
type Machine struct {
	CPU string `json:"cpu"` // the model name
	// Family and Model are the CPU's family and model numbers where the
	// platform gives them (x86's /proc/cpuinfo): a hypervisor may show
	// every CPU of a vendor under one model name ("AMD EPYC" for Zen 1
	// and Zen 5 alike), and these tell them apart.
	Family    string `json:"cpu_family,omitempty"`
	Model     string `json:"cpu_model,omitempty"`
	Cores     int    `json:"cores"` // runtime.NumCPU
	Kernel    string `json:"kernel"`
	Go        string `json:"go"`
	Date      string `json:"date"` // UTC, RFC 3339
	LoadStart string `json:"loadavg_start"`
	LoadEnd   string `json:"loadavg_end"`
	// Pages is the page size regions and the raw baseline's buffers get:
	// shared memory's transparent huge page setting and what it gives.
	Pages string `json:"pages"`
	// TCP is the kernel's default TCP congestion control, which every
	// variant's sockets get ("" where the platform does not say).
	TCP string `json:"tcp_congestion_control,omitempty"`
}

// DescribeMachine reads the CPU model, core count, kernel and Go version.
func DescribeMachine() Machine {
	m := Machine{Cores: runtime.NumCPU(), Go: runtime.Version(),
		Date: time.Now().UTC().Format(time.RFC3339), LoadStart: loadAvg(), Pages: pageSetting(), TCP: congestionControl()}
	m.CPU, m.Family, m.Model = cpuInfo()
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		m.Kernel = unix.ByteSliceToString(u.Sysname[:]) + " " + unix.ByteSliceToString(u.Release[:]) + " " + unix.ByteSliceToString(u.Machine[:])
	}
	return m
}

// CPUType names the CPU as machine types are told apart: the model name,
// with the family and model numbers where they are known.
func (m Machine) CPUType() string {
	if m.Family == "" || m.Model == "" {
		return m.CPU
	}
	return fmt.Sprintf("%s (family %s, model %s)", m.CPU, m.Family, m.Model)
}

// cpuInfo reads the first processor's model name, family and model
// from /proc/cpuinfo ("unknown" and no numbers where it cannot).
func cpuInfo() (name, family, model string) {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown", "", ""
	}
	defer f.Close()
	return parseCPUInfo(bufio.NewScanner(f))
}

// parseCPUInfo reads /proc/cpuinfo's text up to the end of its first
// processor's block.
func parseCPUInfo(sc *bufio.Scanner) (name, family, model string) {
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			if name != "" || family != "" {
				break // the blank line after the first processor
			}
			continue
		}
		v = strings.TrimSpace(v)
		switch strings.TrimSpace(k) {
		case "model name":
			name = v
		case "cpu family":
			family = v
		case "model":
			model = v
		}
	}
	if name == "" {
		name = "unknown"
	}
	return name, family, model
}

// congestionFile holds the kernel's default TCP congestion control.
const congestionFile = "/proc/sys/net/ipv4/tcp_congestion_control"

// congestionControl is the default TCP congestion control ("" when the
// file cannot be read).
func congestionControl() string {
	b, err := os.ReadFile(congestionFile)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// loadAvg is the 1, 5 and 15 minute load averages.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// pageSetting says which pages the suite's memory gets here ("" where
// the platform does not say).
func pageSetting() string {
	setting, huge, ok := shm.ShmemHuge()
	switch {
	case !ok:
		return ""
	case huge:
		return fmt.Sprintf("2 MiB for regions and the raw baseline's buffers (%s is %s; docs/DATAPATH-ROUNDS.md, eleventh round)", shm.ShmemHugeFile, setting)
	}
	return fmt.Sprintf("4 KiB for regions and the raw baseline's buffers (%s is %s; `echo advise >` it gives both 2 MiB pages; docs/DATAPATH-ROUNDS.md, eleventh round)", shm.ShmemHugeFile, setting)
}
