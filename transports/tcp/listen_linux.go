//go:build linux

package tcp

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// Keepalive of the data connections a target accepts: Go's default for
// accepted connections (15 s idle, 15 s between probes, 9 probes).
const (
	acceptedKeepIdle  = 15
	acceptedKeepIntvl = 15
	acceptedKeepCnt   = 9
)

// listenConfig sets the accepted connections' keepalive once, on the
// listening socket (Linux copies it into every connection accepted from
// it), instead of four setsockopt calls per accepted connection: a
// Mooncake initiator with its default (no pool) opens a connection per
// request, and those calls were a tenth of the target's CPU per request.
func listenConfig() net.ListenConfig {
	return net.ListenConfig{KeepAlive: -1, Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			for _, o := range []struct{ level, opt, val int }{
				{unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1},
				{unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, acceptedKeepIdle},
				{unix.IPPROTO_TCP, unix.TCP_KEEPINTVL, acceptedKeepIntvl},
				{unix.IPPROTO_TCP, unix.TCP_KEEPCNT, acceptedKeepCnt},
			} {
				if serr = unix.SetsockoptInt(int(fd), o.level, o.opt, o.val); serr != nil {
					serr = &net.OpError{Op: "setsockopt", Net: "tcp", Err: serr}
					return
				}
			}
		})
		if err != nil {
			return err
		}
		return serr
	}}
}
