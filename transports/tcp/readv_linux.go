//go:build linux

package tcp

import (
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/kvconnect/kvconnect/internal/spin"
)

// vectorReadsHere: this platform reads a frame's payload and the next
// header in one system call.
const vectorReadsHere = true

// readv fills a, then b (both not empty), with what the socket holds (at
// least one byte) in one readv(2), and says how much landed in each. A
// closed peer is io.EOF.
func (r *rawIO) readv(a, b []byte) (na, nb int, err error) {
	r.setIov(0, a)
	r.setIov(1, b)
	r.rcnt = 2
	n, err := r.read()
	if err != nil {
		return 0, 0, err
	}
	na = min(n, len(a))
	return na, n - na, nil
}

// readvN fills bufs (none empty, at most maxReadv), in order, with what
// the socket holds (at least one byte) in one readv(2), and returns how
// many bytes it read in all. A closed peer is io.EOF.
func (r *rawIO) readvN(bufs [][]byte) (int, error) {
	if cap(r.riov) < len(bufs) {
		r.riov = make([]unix.Iovec, len(bufs))
	}
	r.riov = r.riov[:cap(r.riov)]
	for i, b := range bufs {
		r.setIov(i, b)
	}
	r.rcnt = uintptr(len(bufs))
	return r.read()
}

// readSpin reads what the socket holds into a (at least one byte),
// like Read, but polls the socket while sp spins before it waits in the
// runtime's poller: a response due within microseconds then costs no
// sleep and no wake-up (conn.readOwn). The spin cannot see the socket's
// read deadline: the caller bounds sp by it, and stop (set by whoever
// would move the deadline) ends the spin early. slept says the spin
// ended without input and the read waited in the poller.
func (r *rawIO) readSpin(a []byte, sp spin.Spinner, stop *atomic.Bool) (n int, slept bool, err error) {
	if len(a) == 0 {
		return 0, false, nil
	}
	r.setIov(0, a)
	r.rcnt, r.sp, r.spinning, r.slept, r.stop = 1, sp, true, false, stop
	n, err = r.read()
	return n, r.slept, err
}
