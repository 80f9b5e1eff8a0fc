//go:build linux

package tcp

import "syscall"

// rawConn is c's raw socket (for system calls the net package does not
// make), nil when c is not a socket or is closed.
func rawConn(c any) syscall.RawConn {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return rc
}
