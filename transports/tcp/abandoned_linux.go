//go:build linux

package tcp

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// abandoned reports whether the initiator has closed nc (its FIN or RST
// arrived: the socket left ESTABLISHED). Requests still unread on such a
// connection were failed at the initiator when it gave up on them (a
// timeout while this process was stopped, a link cut): applying one now
// would overwrite whatever the initiator wrote since.
func abandoned(nc net.Conn) bool {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	gone := false
	rc.Control(func(fd uintptr) {
		info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
		gone = err == nil && info.State != unix.BPF_TCP_ESTABLISHED
	})
	return gone
}

// abortOnClose makes closing nc reset the connection instead of flushing
// it: data the peer has not received yet is dropped, not retransmitted
// once a cut link is back, so requests the initiator has failed cannot
// land late.
func abortOnClose(nc net.Conn) {
	if tc, ok := nc.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
}
