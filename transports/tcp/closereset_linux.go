//go:build linux

package tcp

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// resetOnClose makes the socket's coming close send a reset (SO_LINGER
// 0) instead of a FIN, if everything sent on it has been acknowledged
// (SIOCOUTQ, the bytes unsent or unacknowledged, is 0); it reports
// whether it did. Both calls are raw (see rawIO).
func (r *rawIO) resetOnClose() (reset bool) {
	r.rc.Control(func(fd uintptr) {
		var q int32
		if _, _, e := unix.RawSyscall(unix.SYS_IOCTL, fd, unix.SIOCOUTQ, uintptr(unsafe.Pointer(&q))); e != 0 || q != 0 {
			return
		}
		l := unix.Linger{Onoff: 1, Linger: 0}
		_, _, e := unix.RawSyscall6(unix.SYS_SETSOCKOPT, fd, unix.SOL_SOCKET, unix.SO_LINGER, uintptr(unsafe.Pointer(&l)), unsafe.Sizeof(l), 0)
		reset = e == 0
	})
	return reset
}
