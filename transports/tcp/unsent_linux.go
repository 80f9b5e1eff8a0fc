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
// call, best effort: refused, the socket queues as before.
func (r *rawIO) limitUnsent(n int) {
	v := int32(n)
	r.rc.Control(func(fd uintptr) {
		unix.RawSyscall6(unix.SYS_SETSOCKOPT, fd, unix.IPPROTO_TCP, unix.TCP_NOTSENT_LOWAT,
			uintptr(unsafe.Pointer(&v)), unsafe.Sizeof(v), 0)
	})
}
