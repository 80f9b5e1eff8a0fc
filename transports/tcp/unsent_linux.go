//go:build linux

package tcp

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// limitUnsent caps the bytes written to the socket but not yet sent at n
// (TCP_NOTSENT_LOWAT): a write that would queue more waits in the
// poller until the peer's acknowledgments let the kernel send what is
// queued, then the writer sends the next piece itself. One raw system
// call; false if the kernel refused it.
func (r *rawIO) limitUnsent(n int) bool {
	v := int32(n)
	ok := false
	r.rc.Control(func(fd uintptr) {
		_, _, e := unix.RawSyscall6(unix.SYS_SETSOCKOPT, fd, unix.IPPROTO_TCP, unix.TCP_NOTSENT_LOWAT,
			uintptr(unsafe.Pointer(&v)), unsafe.Sizeof(v), 0)
		ok = e == 0
	})
	return ok
}
