//go:build !linux

package tcp

import "net"

// abandoned is not known on this platform: a request on a connection the
// initiator closed is still served.
func abandoned(net.Conn) bool { return false }

// abortOnClose makes closing nc reset the connection (see the Linux file).
func abortOnClose(nc net.Conn) {
	if tc, ok := nc.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
}
