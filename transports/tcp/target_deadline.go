package tcp

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"time"
)

// payloadDeadline bounds the reading of WRITE payloads on a target's
// connection without touching the runtime's timers per op: a read
// deadline, set before a payload that is not buffered yet, stays set
// across requests and is moved only when less than half its span is
// left, so a payload stalled mid-way fails after between half the span
// and the span (op_timeout). A request header is not bounded (an idle
// connection waits for the next one as long as it likes): a header read
// that meets the deadline clears it and reads on.
//
// Setting and clearing a deadline per op adds and deletes a runtime
// timer, each often waking the network poller's thread to recompute its
// sleep: on a 64 KiB WRITE stream that cost a tenth of the throughput
// (docs/DATAPATH.md). One goroutine uses it (the connection's server).
type payloadDeadline struct {
	until time.Time // zero when not set
}

// arm makes sure a deadline at least span/2 away is set on nc.
func (d *payloadDeadline) arm(nc net.Conn, span time.Duration) {
	now := time.Now()
	if !d.until.IsZero() && d.until.Sub(now) >= span/2 {
		return
	}
	d.until = now.Add(span)
	nc.SetReadDeadline(d.until)
}

// readHeader reads a request header into hb through br, clearing the
// deadline if it meets it (the bytes read before it are kept).
func (d *payloadDeadline) readHeader(nc net.Conn, br *bufio.Reader, hb []byte) error {
	n := 0
	for {
		m, err := io.ReadFull(br, hb[n:])
		n += m
		if err == nil || d.until.IsZero() || !errors.Is(err, os.ErrDeadlineExceeded) {
			return err
		}
		d.until = time.Time{}
		nc.SetReadDeadline(time.Time{})
	}
}

// stateCheck rate-limits looking at a connection's TCP state (a system
// call, abandoned) to once per stateCheckEvery of wall time: a target
// that was stopped looks at the first request it reads when it runs
// again (the clock moved on meanwhile), and a busy one applies at most
// that much of requests after the initiator's FIN arrived (the initiator
// fails requests after op_timeout, seconds, before it closes).
type stateCheck struct {
	last time.Time
}

const stateCheckEvery = time.Millisecond

// due reports whether to look now, and if so counts it as looked.
func (c *stateCheck) due() bool {
	now := time.Now()
	if !c.last.IsZero() && now.Sub(c.last) < stateCheckEvery {
		return false
	}
	c.last = now
	return true
}
