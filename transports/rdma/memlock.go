package rdma

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/kvconnect/kvconnect/units"
)

// capIPCLock is CAP_IPC_LOCK's bit in the capability sets.
const capIPCLock = 14

// Memlock is the process's locked-memory budget. Registering memory with
// an RDMA device pins it; the kernel refuses (ENOMEM) to pin more than
// RLIMIT_MEMLOCK unless the process has CAP_IPC_LOCK.
type Memlock struct {
	// Soft is the soft RLIMIT_MEMLOCK in bytes (the one the kernel applies).
	Soft uint64
	// Hard is the hard limit in bytes.
	Hard uint64
	// SoftUnlimited and HardUnlimited are set for RLIM_INFINITY.
	SoftUnlimited bool
	HardUnlimited bool
	// CapIPCLock is true when the process has CAP_IPC_LOCK in its
	// effective set: the limit does not apply to it.
	CapIPCLock bool
	// Err says why the limit could not be read ("" when it was).
	Err string
}

func (m Memlock) String() string {
	if m.Err != "" {
		return "unknown (" + m.Err + ")"
	}
	s := "soft " + fmtLimit(m.Soft, m.SoftUnlimited) + ", hard " + fmtLimit(m.Hard, m.HardUnlimited)
	if m.CapIPCLock {
		s += ", CAP_IPC_LOCK"
	}
	return s
}

func fmtLimit(v uint64, unlimited bool) string {
	if unlimited {
		return "unlimited"
	}
	return units.FormatSize(v)
}

// enough reports whether registering min bytes will pass.
func (m Memlock) enough(min uint64) bool {
	return m.Err != "" || min == 0 || m.SoftUnlimited || m.CapIPCLock || m.Soft >= min
}

// parseCapEff reports whether the CapEff line of /proc/<pid>/status has
// CAP_IPC_LOCK.
func parseCapEff(status string) (bool, error) {
	for _, line := range strings.Split(status, "\n") {
		rest, ok := strings.CutPrefix(line, "CapEff:")
		if !ok {
			continue
		}
		v, err := strconv.ParseUint(strings.TrimSpace(rest), 16, 64)
		if err != nil {
			return false, fmt.Errorf("CapEff %q is not a hex capability mask", strings.TrimSpace(rest))
		}
		return v&(1<<capIPCLock) != 0, nil
	}
	return false, fmt.Errorf("no CapEff line")
}
