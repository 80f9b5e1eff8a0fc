//go:build unix

package ascend

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// accessRW checks that the real user may read and write path, as opening
// a device node read-write needs.
func accessRW(path string) error {
	return unix.Access(path, unix.R_OK|unix.W_OK)
}

// errnoName is the symbolic name of an errno ("ENOENT"), or "".
func errnoName(e syscall.Errno) string {
	return unix.ErrnoName(e)
}
