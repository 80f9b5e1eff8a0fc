//go:build !linux

package tcp

import (
	"errors"
	"net"
)

// rawIO would read and write a socket with raw system calls: not built
// on this platform, where the connection's own Read and Write are used.
type rawIO struct {
	onWait     waitArmer
	armR, armW bool
}

// newRawIO is nil: no raw I/O here.
func newRawIO(net.Conn) *rawIO { return nil }

// bind is nil: no raw I/O here.
func (*rawIO) bind(net.Conn) *rawIO { return nil }

// unbind does nothing.
func (*rawIO) unbind() {}

var errNoRawIO = errors.New("tcp: no raw socket I/O on this platform")

func (*rawIO) Read([]byte) (int, error)  { return 0, errNoRawIO }
func (*rawIO) Write([]byte) (int, error) { return 0, errNoRawIO }
func (*rawIO) Writev([][]byte) error     { return errNoRawIO }

// peerClosed is not known on this platform.
func (*rawIO) peerClosed() (closed, reset bool) { return false, false }

// resetOnClose does nothing here: the close sends a FIN.
func (*rawIO) resetOnClose() bool { return false }

// limitUnsent does nothing here: the socket queues what it may.
func (*rawIO) limitUnsent(int) {}
