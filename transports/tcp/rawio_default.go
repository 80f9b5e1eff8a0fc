//go:build !linux

package tcp

import (
	"errors"
	"net"
)

// rawIO would read and write a socket with raw system calls: not built
// on this platform, where the connection's own Read and Write are used.
type rawIO struct{}

// newRawIO is nil: no raw I/O here.
func newRawIO(net.Conn) *rawIO { return nil }

var errNoRawIO = errors.New("tcp: no raw socket I/O on this platform")

func (*rawIO) Read([]byte) (int, error)  { return 0, errNoRawIO }
func (*rawIO) Write([]byte) (int, error) { return 0, errNoRawIO }
func (*rawIO) Writev([][]byte) error     { return errNoRawIO }
