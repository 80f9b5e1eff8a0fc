//go:build linux

package tcp

import (
	"net"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// unreadBytes is how many bytes wait unread in nc's socket (FIONREAD, alias TIOCINQ).
func unreadBytes(nc net.Conn) int {
	rc := rawConn(nc)
	if rc == nil {
		return 0
	}
	n := 0
	rc.Control(func(fd uintptr) { n, _ = unix.IoctlGetInt(int(fd), unix.TIOCINQ) })
	return n
}

// acceptPending reports whether ln's accept queue holds a connection.
func acceptPending(ln net.Listener) bool {
	rc := rawConn(ln)
	if rc == nil {
		return false
	}
	ready := false
	rc.Control(func(fd uintptr) {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, 0)
		ready = err == nil && n > 0 && fds[0].Revents&unix.POLLIN != 0
	})
	return ready
}

// idleState says what an idle initiator connection's socket holds, with
// no one reading it: errPeerClosed when the peer closed it (EOF), an
// error when it broke or holds bytes nothing asked for, nil when it is
// fine (nothing to read). It peeks: it consumes nothing.
func idleState(nc net.Conn) error {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return err
	}
	var state error
	rc.Control(func(fd uintptr) {
		// A non-blocking peek, so a raw system call: through the
		// runtime's it would wake its monitor thread (futexWake in
		// internal/ring says why that costs), once per batch on each
		// connection found idle.
		var b [1]byte
		r, _, e := unix.RawSyscall6(unix.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&b[0])), 1, unix.MSG_PEEK|unix.MSG_DONTWAIT, 0, 0)
		n := int(r)
		switch {
		case e == unix.EAGAIN || e == unix.EINTR:
		case e != 0:
			state = e
		case n == 0:
			state = errPeerClosed
		default:
			state = errUnsolicited
		}
	})
	return state
}
