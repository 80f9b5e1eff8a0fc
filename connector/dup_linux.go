//go:build linux

package connector

import "golang.org/x/sys/unix"

func dupCloexec(fd int) (int, error) { return unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0) }
