package tcp

import (
	"errors"
	"io"
	"net"
	"sync/atomic"
	"time"

	"github.com/kvconnect/kvconnect/internal/spin"
	"github.com/kvconnect/kvconnect/transports/tcp/internal/wire"
)

// frameReader reads frames (a header, then maybe a payload) from a
// connection through a small buffer, and keeps large payloads out of
// it. A buffered read takes whatever the socket holds, up to
// readBufferSize: many small frames come in one system call, the point
// of the buffer. But behind a large payload's header it would take that
// payload's first readBufferSize bytes, copied once more into place
// after (a fifth of a 64 KiB WRITE stream's target CPU went to that
// copy). So:
//
//   - a payload's part that is not buffered yet is read straight into
//     its place when the payload is at least a buffer large or that part
//     at least half a buffer, together with at most the next header in
//     the same system call (readv where the platform has it: a stream of
//     large frames costs one system call each, like a stream of bare
//     payloads);
//   - after a payload at least as large as the buffer, a header that was
//     not read with it is read exactly, not with a buffer-full behind it.
//
// One goroutine at a time uses a frameReader (the holder of the
// connection's read side).
type frameReader struct {
	nc  net.Conn
	raw *rawIO // nil: nc's own Read, no readv (platform, or nc is not a socket)
	buf []byte
	r   int // buf[r:w] was read from nc and not consumed
	w   int
	// direct: the last payload was at least a buffer large, so the next
	// header's missing bytes are read exactly.
	direct bool
	// spinUntil, when set, makes the next read of the socket poll it
	// without sleeping until then (spinner learns of preemptions): the
	// holder of a lone small op's read side sets it (readOwn).
	spinUntil time.Time
	spinner   *spin.Adapt
	spinStop  atomic.Bool // set: a spin in progress ends (the holder gave up)
	spinLock  bool        // the spinning goroutine is locked to its thread: never yield
	// spun says how the last read that spun ended: caught (input came
	// while it spun) or slept (it waited in the poller after).
	spun spinOutcome
}

type spinOutcome int

const (
	notSpun spinOutcome = iota
	spunCaught
	spunSlept
)

func newFrameReader(nc net.Conn) *frameReader {
	return &frameReader{nc: nc, raw: newRawIO(nc), buf: make([]byte, readBufferSize)}
}

// Buffered is how many bytes were read from the socket and not yet
// consumed.
func (fr *frameReader) Buffered() int { return fr.w - fr.r }

// take copies buffered bytes into p.
func (fr *frameReader) take(p []byte) int {
	n := copy(p, fr.buf[fr.r:fr.w])
	fr.r += n
	return n
}

// fill reads at least one byte into the buffer's free end (the
// buffer is empty or its rest is moved to the front first).
func (fr *frameReader) fill() error {
	if fr.r > 0 {
		fr.w = copy(fr.buf, fr.buf[fr.r:fr.w])
		fr.r = 0
	}
	for range 100 {
		n, err := fr.read(fr.buf[fr.w:])
		fr.w += n
		if n > 0 {
			return nil // an error with data comes back on the next read
		}
		if err != nil {
			return err
		}
	}
	return io.ErrNoProgress
}

// read is one read of the socket, spinning first if spinUntil asks.
func (fr *frameReader) read(p []byte) (int, error) {
	if fr.raw == nil {
		return fr.nc.Read(p)
	}
	if fr.spinUntil.IsZero() {
		return fr.raw.Read(p)
	}
	until := fr.spinUntil
	fr.spinUntil = time.Time{}
	sp := spin.Until(until, fr.spinner)
	if fr.spinLock {
		sp.Locked()
	}
	n, slept, err := fr.raw.readSpin(p, sp, &fr.spinStop)
	fr.spun = spunCaught
	if slept {
		fr.spun = spunSlept
	}
	return n, err
}

// Read reads header bytes (use it through io.ReadFull): buffered ones,
// else what the socket holds (exactly what p asks after a large
// payload).
func (fr *frameReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if fr.Buffered() == 0 {
		if fr.direct {
			return fr.read(p)
		}
		if err := fr.fill(); err != nil {
			return 0, err
		}
	}
	return fr.take(p), nil
}

// header reads a whole header into hb (io.ReadFull's contract).
func (fr *frameReader) header(hb []byte) (int, error) {
	return io.ReadFull(fr, hb)
}

// payload reads len(p) bytes of payload into p (io.ReadFull's
// contract).
func (fr *frameReader) payload(p []byte) (int, error) {
	n := fr.take(p)
	fr.direct = len(p) >= len(fr.buf)
	for n < len(p) {
		// The buffer is empty here.
		rest := p[n:]
		if !fr.direct && len(rest) < len(fr.buf)/2 {
			if err := fr.fill(); err != nil {
				return n, unexpectedEOF(err)
			}
			n += fr.take(rest)
			continue
		}
		var m, ahead int
		var err error
		if fr.raw != nil {
			m, ahead, err = fr.raw.readv(rest, fr.buf[:wire.HeaderSize])
		} else {
			m, err = fr.nc.Read(rest) // no readv: nor raw I/O
		}
		fr.r, fr.w = 0, ahead
		n += m
		if n < len(p) && err != nil {
			return n, unexpectedEOF(err)
		}
	}
	return n, nil
}

// discard skips n bytes of payload.
func (fr *frameReader) discard(n uint64) error {
	fr.direct = false
	for n > 0 {
		if fr.Buffered() == 0 {
			if err := fr.fill(); err != nil {
				return unexpectedEOF(err)
			}
		}
		k := uint64(fr.Buffered())
		if k > n {
			k = n
		}
		fr.r += int(k)
		n -= k
	}
	return nil
}

// unexpectedEOF is err, io.ErrUnexpectedEOF for an EOF in the middle of
// a payload.
func unexpectedEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}
