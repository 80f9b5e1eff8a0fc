//go:build linux

package tcp

import (
	"io"
	"net"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// vectorReadsHere: this platform reads a frame's payload and the next
// header in one system call.
const vectorReadsHere = true

// vectorReader reads into two buffers in one readv(2) on a socket,
// waiting in the runtime's network poller like net.Conn.Read (deadlines
// included). One goroutine at a time uses it.
type vectorReader struct {
	rc    syscall.RawConn
	iov   [2]unix.Iovec
	n     int
	errno syscall.Errno
	fn    func(fd uintptr) bool // do, bound once (no allocation per read)
}

// newVectorReader is nil when nc is not a socket it can read itself.
func newVectorReader(nc net.Conn) *vectorReader {
	rc := rawConn(nc)
	if rc == nil {
		return nil
	}
	v := &vectorReader{rc: rc}
	v.fn = v.do
	return v
}

// read fills a, then b, with what the socket holds (at least one byte),
// and says how much landed in each. A closed peer is io.EOF.
func (v *vectorReader) read(a, b []byte) (na, nb int, err error) {
	v.iov[0].Base, v.iov[1].Base = &a[0], &b[0]
	v.iov[0].SetLen(len(a))
	v.iov[1].SetLen(len(b))
	v.n, v.errno = 0, 0
	err = v.rc.Read(v.fn)
	v.iov[0].Base, v.iov[1].Base = nil, nil // hold no caller memory
	if err == nil && v.errno != 0 {
		err = os.NewSyscallError("readv", v.errno)
	}
	if err != nil {
		return 0, 0, err
	}
	if v.n == 0 {
		return 0, 0, io.EOF
	}
	na = min(v.n, len(a))
	return na, v.n - na, nil
}

// do is the poller's callback: false asks it to wait for input.
func (v *vectorReader) do(fd uintptr) bool {
	for {
		n, _, e := unix.Syscall(unix.SYS_READV, fd, uintptr(unsafe.Pointer(&v.iov[0])), 2)
		if e == unix.EINTR {
			continue
		}
		if e == unix.EAGAIN {
			return false
		}
		v.n, v.errno = int(n), e
		return true
	}
}
