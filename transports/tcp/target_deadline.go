package tcp

import (
	"errors"
	"io"
	"net"
	"os"
	"time"
)

// connDeadlines bound a target connection's payload reads and its
// writes without touching the runtime's timers per op: a deadline, set
// before a payload read that must wait (or a write), stays set across
// requests and is moved only when less than half its span is left, so a
// payload or write stalled mid-way fails after between half the span
// and the span (op_timeout). A request header is not bounded (an idle
// connection waits for the next one as long as it likes): a header read
// that meets the read deadline clears it and reads on. A write deadline
// passing while the connection idles harms nothing: the next write
// moves it first.
//
// Setting and clearing a deadline per op adds and deletes a runtime
// timer, each often waking the network poller's thread to recompute its
// sleep: on a 64 KiB WRITE stream that cost a tenth of the throughput
// (docs/DATAPATH-ROUNDS.md). One goroutine uses it (the connection's server).
type connDeadlines struct {
	read, write time.Time // zero when not set
}

// waitArmer is told that a raw call is about to wait for its socket
// (rawIO.onWait). It runs inside the poller callback, on the calling
// goroutine, and may set the connection's deadlines.
type waitArmer interface {
	armOnWait(write bool)
}

// armRead makes sure a read deadline at least span/2 away is set on nc.
func (d *connDeadlines) armRead(nc net.Conn, span time.Duration) {
	if until, moved := rearm(d.read, span); moved {
		d.read = until
		nc.SetReadDeadline(until)
	}
}

// armWrite makes sure a write deadline at least span/2 away is set on nc.
func (d *connDeadlines) armWrite(nc net.Conn, span time.Duration) {
	if until, moved := rearm(d.write, span); moved {
		d.write = until
		nc.SetWriteDeadline(until)
	}
}

// rearm is the deadline to set for span given the current one, and
// whether it differs (less than half the span left, or none).
func rearm(cur time.Time, span time.Duration) (time.Time, bool) {
	now := time.Now()
	if !cur.IsZero() && cur.Sub(now) >= span/2 {
		return cur, false
	}
	return now.Add(span), true
}

// readHeader reads a request header into hb through r (nc or a reader
// on it), clearing the read deadline if it meets it (the bytes read
// before it are kept).
func (d *connDeadlines) readHeader(nc net.Conn, r io.Reader, hb []byte) error {
	n := 0
	for {
		m, err := io.ReadFull(r, hb[n:])
		n += m
		if err == nil || d.read.IsZero() || !errors.Is(err, os.ErrDeadlineExceeded) {
			return err
		}
		d.read = time.Time{}
		nc.SetReadDeadline(time.Time{})
	}
}

// stateCheck rate-limits looking at a connection's TCP state (a system
// call, abandoned) to once per stateCheckEvery of wall time or
// stateCheckBytes of WRITE payload, whichever comes first: a target that
// was stopped looks at the first request it reads when it runs again
// (the clock moved on meanwhile), and a busy one applies at most that
// much after the initiator's reset arrived (an initiator resets a
// connection the moment it gives up on a batch with requests on it, and
// Transfer returns right after: the caller may write the same place
// again at once, over another connection). Bytes already read into the
// target when the reset arrives (one request or group being applied)
// still land: the bound is the check's spacing plus one of those.
type stateCheck struct {
	last  time.Time
	bytes uint64 // WRITE payload since the last look
}

const (
	stateCheckEvery = time.Millisecond
	stateCheckBytes = 256 << 10
)

// due reports whether to look now, before applying a WRITE payload of n
// bytes, and if so counts it as looked.
func (c *stateCheck) due(n uint64) bool {
	now := time.Now()
	c.bytes += n
	if !c.last.IsZero() && now.Sub(c.last) < stateCheckEvery && c.bytes < stateCheckBytes {
		return false
	}
	c.last, c.bytes = now, 0
	return true
}

// boundFrames bounds fw's writes (the answers on a connection that
// speaks kvconnect's framing) by op_timeout, as boundWrite does a
// Mooncake answer's: an initiator that stops reading (stopped, wedged)
// would otherwise hold the regions its READ answers come from, and a
// deregistration waiting for them, as long as the connection lives. The
// deadline is armed only when a write must wait for the socket, or moved
// when one is set already: a write that finds room costs no timer.
func (tc *targetConn) boundFrames(fw *frameWriter) {
	span := time.Duration(tc.t.opts.OpTimeout)
	if fw.raw == nil {
		fw.bound = func() { tc.dl.armWrite(tc.nc, span) }
		return
	}
	fw.raw.onWait = tc
	fw.bound = func() {
		if tc.dl.write.IsZero() {
			fw.raw.armW = true
			return
		}
		tc.dl.armWrite(tc.nc, span)
	}
}
