//go:build linux

package rdma

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// accessRW is access(2) with R_OK|W_OK.
func accessRW(path string) error {
	return unix.Access(path, unix.R_OK|unix.W_OK)
}

// errnoName is the symbolic name of e, "ENOSYS".
func errnoName(e syscall.Errno) string {
	return unix.ErrnoName(e)
}

// ReadMemlock reads this process's RLIMIT_MEMLOCK (getrlimit) and whether
// it has CAP_IPC_LOCK (/proc/self/status).
func ReadMemlock() Memlock {
	var m Memlock
	var r unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &r); err != nil {
		m.Err = "getrlimit(RLIMIT_MEMLOCK): " + err.Error()
		return m
	}
	m.Soft, m.SoftUnlimited = r.Cur, r.Cur == unix.RLIM_INFINITY
	m.Hard, m.HardUnlimited = r.Max, r.Max == unix.RLIM_INFINITY
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		m.CapIPCLock, _ = parseCapEff(string(b))
	}
	return m
}
