//go:build !linux

package rdma

import (
	"runtime"
	"syscall"
)

func accessRW(path string) error { return syscall.ENOTSUP }

func errnoName(e syscall.Errno) string { return "" }

// ReadMemlock cannot read the limit off Linux.
func ReadMemlock() Memlock {
	return Memlock{Err: "RLIMIT_MEMLOCK is not checked on " + runtime.GOOS}
}
