//go:build linux

package tcp

import (
	"io"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/kvconnect/kvconnect/internal/spin"
)

// vectorReadsHere: this platform reads a frame's payload and the next
// header in one system call.
const vectorReadsHere = true

// vectorReader reads into two buffers in one readv(2) on a socket,
// waiting in the runtime's network poller like net.Conn.Read (deadlines
// included). The socket is non-blocking: the call is a raw one (see
// rawIO). One goroutine at a time uses it.
type vectorReader struct {
	rc       syscall.RawConn
	iov      [2]unix.Iovec
	n        int
	errno    syscall.Errno
	fn       func(fd uintptr) bool // do, bound once (no allocation per read)
	cnt      uintptr               // iovecs in use
	sp       spin.Spinner          // while spinning, EAGAIN is retried while sp spins
	spinning bool
	slept    bool         // the last readSpin waited in the poller
	stop     *atomic.Bool // while spinning: true ends the spin
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
	v.cnt = 2
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
		n, _, e := unix.RawSyscall(unix.SYS_READV, fd, uintptr(unsafe.Pointer(&v.iov[0])), v.cnt)
		if e == unix.EINTR {
			continue
		}
		if e == unix.EAGAIN {
			if v.spinning {
				if !v.stop.Load() && v.sp.SpinSlow() {
					continue
				}
				v.sp.Done()
				v.spinning, v.slept = false, true
			}
			return false
		}
		v.n, v.errno = int(n), e
		if v.spinning {
			v.sp.Done()
			v.spinning = false
		}
		return true
	}
}

// readSpin reads what the socket holds into a (at least one byte),
// like read, but polls the socket while sp spins before it waits in the
// runtime's poller: a response due within microseconds then costs no
// sleep and no wake-up (conn.readOwn). The spin cannot see nc's read
// deadline: the caller bounds sp by it, and stop (set by whoever would
// move the deadline) ends the spin early. slept says the spin ended
// without input and the read waited in the poller.
func (v *vectorReader) readSpin(a []byte, sp spin.Spinner, stop *atomic.Bool) (n int, slept bool, err error) {
	v.iov[0].Base = &a[0]
	v.iov[0].SetLen(len(a))
	v.n, v.errno, v.cnt, v.sp, v.spinning, v.slept, v.stop = 0, 0, 1, sp, true, false, stop
	err = v.rc.Read(v.fn)
	if v.spinning { // the poller gave up (deadline, close) before a read
		v.sp.Done()
		v.spinning, v.slept = false, true
	}
	v.iov[0].Base, v.stop = nil, nil
	if err == nil && v.errno != 0 {
		err = os.NewSyscallError("readv", v.errno)
	}
	if err != nil {
		return 0, v.slept, err
	}
	if v.n == 0 {
		return 0, v.slept, io.EOF
	}
	return v.n, v.slept, nil
}
