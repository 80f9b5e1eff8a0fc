//go:build linux

package connector

import (
	"os"

	"golang.org/x/sys/unix"
)

func dupCloexec(fd int) (int, error) { return unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0) }

// fileIdentity is f's device, inode and size.
func fileIdentity(f *os.File) (viewKey, int64, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return viewKey{}, 0, err
	}
	return viewKey{dev: uint64(st.Dev), ino: st.Ino}, st.Size, nil
}
