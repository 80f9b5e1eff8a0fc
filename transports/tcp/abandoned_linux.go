//go:build linux

package tcp

import (
	"net"

	"golang.org/x/sys/unix"
)

// abandoned reports whether the initiator has closed nc (its FIN or RST
// arrived: the socket left ESTABLISHED). Requests still unread on such a
// connection were failed at the initiator when it gave up on them (a
// timeout while this process was stopped, a link cut): applying one now
// would overwrite whatever the initiator wrote since.
func abandoned(nc net.Conn) bool {
	st, ok := tcpState(nc)
	return ok && st != unix.BPF_TCP_ESTABLISHED
}

// peerReset reports whether the initiator reset nc (its RST arrived): it
// aborted the connection, failing whatever it had not seen answered. A
// FIN alone is not that: a Mooncake v1 client closes right after its
// last WRITE's bytes left, expecting them applied.
func peerReset(nc net.Conn) bool {
	st, ok := tcpState(nc)
	return ok && st == unix.BPF_TCP_CLOSE
}

// tcpState is nc's TCP state (TCP_INFO), ok false when unknown.
func tcpState(nc net.Conn) (state uint8, ok bool) {
	rc := rawConn(nc)
	if rc == nil {
		return 0, false
	}
	rc.Control(func(fd uintptr) {
		info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
		if err == nil {
			state, ok = info.State, true
		}
	})
	return state, ok
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
