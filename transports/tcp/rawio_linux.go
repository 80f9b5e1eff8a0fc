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

// rawIO reads and writes a socket with raw system calls
// (unix.RawSyscall), waiting in the runtime's network poller when the
// socket is not ready (deadlines included), like net.Conn's Read and
// Write. The socket is non-blocking, so no call blocks; what a raw call
// saves is the runtime's bookkeeping around a system call, and above all
// waking its monitor thread (sysmon), which sleeps while the process is
// idle and is woken by the first system call after: once per request on
// a target that answers one request at a time. One reader and one
// writer at a time.
type rawIO struct {
	rc syscall.RawConn

	// The read side: a readv(2) into riov[:rcnt] (one buffer; a payload
	// and the next header; or a group's payloads and the next header:
	// frameReader), spinning first while spinning is set (readSpin).
	riov     []unix.Iovec
	riov0    [2]unix.Iovec
	rcnt     uintptr
	rn       int
	re       syscall.Errno
	rfn      func(fd uintptr) bool // doRead, bound once (no allocation per call)
	sp       spin.Spinner          // while spinning, EAGAIN is retried while sp spins
	spinning bool
	slept    bool         // the last readSpin waited in the poller
	stop     *atomic.Bool // while spinning: true ends the spin

	// The write side.
	one  [1][]byte    // Write's piece
	iov  []unix.Iovec // Writev's
	iov0 [4]unix.Iovec
	vn   int // iovecs in use
	wn   int
	we   syscall.Errno
	vfn  func(fd uintptr) bool

	// onWait, when set, is told just before a read (write false) or a
	// Writev (true) waits for the socket, if armR or armW asks for it;
	// each flag is cleared once told. A caller arms its deadline there,
	// so a call that finds the socket ready costs no runtime timer.
	onWait     waitArmer
	armR, armW bool
}

// newRawIO is nil when nc is not a socket it can use.
func newRawIO(nc net.Conn) *rawIO { return new(rawIO).bind(nc) }

// bind points r at nc, ready for a new connection (nothing of the last
// one kept), and returns it; nil when nc is not a socket it can use. A
// server goroutine binds one rawIO to each connection it serves.
func (r *rawIO) bind(nc net.Conn) *rawIO {
	rc := rawConn(nc)
	if rc == nil {
		return nil
	}
	if r.rfn == nil {
		r.rfn, r.vfn = r.doRead, r.doWritev
		r.iov = r.iov0[:0]
		r.riov = r.riov0[:]
	}
	r.rc, r.onWait, r.armR, r.armW = rc, nil, false, false
	return r
}

// unbind drops r's references to its connection.
func (r *rawIO) unbind() { r.rc, r.onWait = nil, nil }

// Read reads what the socket holds into p (at least one byte). A closed
// peer is io.EOF.
func (r *rawIO) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	r.setIov(0, p)
	r.rcnt = 1
	return r.read()
}

// setIov points riov[i] at p.
func (r *rawIO) setIov(i int, p []byte) {
	r.riov[i].Base = &p[0]
	r.riov[i].SetLen(len(p))
}

// read runs one read of riov[:rcnt] through the poller.
func (r *rawIO) read() (int, error) {
	r.rn, r.re = 0, 0
	err := r.rc.Read(r.rfn)
	if r.spinning { // the poller gave up (deadline, close) before a read
		r.sp.Done()
		r.spinning, r.slept = false, true
	}
	clear(r.riov[:r.rcnt]) // hold no caller memory
	r.stop = nil
	if err == nil && r.re != 0 {
		err = os.NewSyscallError("readv", r.re)
	}
	if err != nil {
		return 0, err
	}
	if r.rn == 0 {
		return 0, io.EOF
	}
	return r.rn, nil
}

// doRead is the poller's read callback: false asks it to wait for input.
func (r *rawIO) doRead(fd uintptr) bool {
	for {
		n, _, e := unix.RawSyscall(unix.SYS_READV, fd, uintptr(unsafe.Pointer(&r.riov[0])), r.rcnt)
		switch e {
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			if r.spinning {
				if !r.stop.Load() && r.sp.SpinSlow() {
					continue
				}
				r.sp.Done()
				r.spinning, r.slept = false, true
			}
			if r.armR {
				r.armR = false
				r.onWait.armOnWait(false)
			}
			return false
		}
		r.rn, r.re = int(n), e
		if r.spinning {
			r.sp.Done()
			r.spinning = false
		}
		return true
	}
}

// Write writes all of p (or fails).
func (r *rawIO) Write(p []byte) (int, error) {
	r.one[0] = p
	err := r.Writev(r.one[:])
	r.one[0] = nil
	if err != nil {
		return 0, err
	}
	return len(p), nil
}

// Writev writes all of bufs, in order (or fails). It may modify bufs.
func (r *rawIO) Writev(bufs [][]byte) error {
	for len(bufs) > 0 {
		r.iov = r.iov[:0]
		for _, b := range bufs {
			if len(b) == 0 {
				continue
			}
			if len(r.iov) == 1024 { // IOV_MAX
				break
			}
			v := unix.Iovec{Base: &b[0]}
			v.SetLen(len(b))
			r.iov = append(r.iov, v)
		}
		if len(r.iov) == 0 {
			return nil
		}
		r.vn, r.wn, r.we = len(r.iov), 0, 0
		err := r.rc.Write(r.vfn)
		clear(r.iov) // hold no caller memory
		if err == nil && r.we != 0 {
			err = os.NewSyscallError("writev", r.we)
		}
		if err != nil {
			return err
		}
		// Drop what was written.
		n := r.wn
		for len(bufs) > 0 && n >= len(bufs[0]) {
			n -= len(bufs[0])
			bufs = bufs[1:]
		}
		if n > 0 {
			bufs[0] = bufs[0][n:]
		}
	}
	return nil
}

func (r *rawIO) doWritev(fd uintptr) bool {
	for {
		n, _, e := unix.RawSyscall(unix.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&r.iov[0])), uintptr(r.vn))
		switch e {
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			if r.armW {
				r.armW = false
				r.onWait.armOnWait(true)
			}
			return false
		}
		if e == 0 {
			r.wn = int(n)
		}
		r.we = e
		return true
	}
}
