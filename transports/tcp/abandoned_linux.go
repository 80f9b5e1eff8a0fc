//go:build linux

package tcp

import (
	"net"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// abandoned reports whether the initiator has closed nc (its FIN or RST
// arrived: the socket left ESTABLISHED). Requests still unread on such a
// connection were failed at the initiator when it gave up on them (a
// timeout while this process was stopped, a link cut): applying one now
// would overwrite whatever the initiator wrote since.
func abandoned(nc net.Conn) bool {
	closed, _ := peerClosed(rawConn(nc))
	return closed
}

// peerClosed reads a connection's TCP state once (TCP_INFO): closed when
// the socket left ESTABLISHED (the peer's FIN or RST arrived), reset when
// it is CLOSE (an RST did: the initiator aborted the connection, failing
// whatever it had not seen answered; a FIN alone is not that, since a
// Mooncake v1 client closes right after its last WRITE's bytes left,
// expecting them applied). Neither when the state is unknown (rc nil, or
// the call failed).
//
// The call is raw (unix.RawSyscall6, no runtime bookkeeping and no
// monitor thread woken: see rawIO): it runs on a pool-off Mooncake
// connection's only request. Only tcpi_state, the first byte of struct
// tcp_info, is copied out.
func peerClosed(rc syscall.RawConn) (closed, reset bool) {
	if rc == nil {
		return false, false
	}
	var info [8]byte
	ok := false
	rc.Control(func(fd uintptr) {
		n := uint32(len(info))
		_, _, e := unix.RawSyscall6(unix.SYS_GETSOCKOPT, fd, unix.IPPROTO_TCP, unix.TCP_INFO,
			uintptr(unsafe.Pointer(&info[0])), uintptr(unsafe.Pointer(&n)), 0)
		ok = e == 0 && n >= 1
	})
	if !ok {
		return false, false
	}
	return info[0] != unix.BPF_TCP_ESTABLISHED, info[0] == unix.BPF_TCP_CLOSE
}

// peerClosed is the socket's peerClosed.
func (r *rawIO) peerClosed() (closed, reset bool) { return peerClosed(r.rc) }

// abortOnClose makes closing nc reset the connection instead of flushing
// it: data the peer has not received yet is dropped, not retransmitted
// once a cut link is back, so requests the initiator has failed cannot
// land late.
func abortOnClose(nc net.Conn) {
	if tc, ok := nc.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
}
