package tcp

import (
	"errors"
	"io"
	"net"
	"slices"
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

	tab []byte   // a group's header table (group)
	iov [][]byte // payloads' scratch
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

// maxReadv bounds the buffers of one readv: a group's payloads are read
// at most this many at a time (each one system call reads whatever the
// socket holds across them).
const maxReadv = 64

// maxReadvBytes bounds the bytes one readv asks for: past it the next
// payload waits for the next call. The kernel tells the sender about the
// room a read made only once the read returns, so a reader that drains
// megabytes per call leaves the sender waiting meanwhile: 256 KiB cut a
// 16 KiB WRITE stream's target to a fifth of the system calls and no
// longer stalled the sender (docs/DATAPATH-ROUNDS.md, twenty-fourth round).
const maxReadvBytes = 256 << 10

// group reads the header table of the group g announces and decodes it
// into hs (appended from hs[:0]); responses says which kind it must hold
// (wire.DecodeGroup).
func (fr *frameReader) group(g *wire.Header, hs []wire.Header, responses bool) ([]wire.Header, error) {
	n := int(g.Length)
	if cap(fr.tab) < n {
		fr.tab = make([]byte, wire.MaxGroup*wire.HeaderSize)
	}
	tab := fr.tab[:n]
	fr.direct = false // the table is read through the buffer
	if _, err := io.ReadFull(fr, tab); err != nil {
		return hs[:0], unexpectedEOF(err)
	}
	return wire.DecodeGroup(tab, hs, responses)
}

// payloads fills each of dsts (none empty), in order, as payload does
// one: buffered bytes first, then straight from the socket, many
// payloads per readv together with the next header's bytes, or through
// the buffer when what is left is small. It returns the bytes read.
func (fr *frameReader) payloads(dsts [][]byte) (int, error) {
	if fr.raw == nil || slices.ContainsFunc(dsts, isEmpty) {
		// (an empty place has no first byte for an iovec: read them one
		// by one; no caller passes one)
		total := 0
		for _, p := range dsts {
			n, err := fr.payload(p)
			total += n
			if err != nil {
				return total, err
			}
		}
		return total, nil
	}
	total, rest := 0, 0
	for _, p := range dsts {
		rest += len(p)
	}
	fr.direct = len(dsts) > 0 && len(dsts[len(dsts)-1]) >= len(fr.buf)
	i, off := 0, 0 // dsts[i][off:] is the next byte's place
	for i < len(dsts) {
		if fr.Buffered() > 0 {
			n := fr.take(dsts[i][off:])
			total, rest, off = total+n, rest-n, off+n
		} else if rest < len(fr.buf)/2 {
			if err := fr.fill(); err != nil {
				return total, unexpectedEOF(err)
			}
			continue
		} else {
			// The buffer is empty: read into the places, then the next
			// header's.
			iov := append(fr.iov[:0], dsts[i][off:])
			want := len(iov[0])
			for _, p := range dsts[i+1:] {
				if len(iov) == maxReadv-1 || want >= maxReadvBytes {
					break
				}
				iov = append(iov, p)
				want += len(p)
			}
			iov = append(iov, fr.buf[:wire.HeaderSize])
			m, err := fr.raw.readvN(iov)
			clear(iov)
			fr.iov = iov[:0]
			ahead := max(m-want, 0)
			m -= ahead
			fr.r, fr.w = 0, ahead
			total, rest = total+m, rest-m
			for m > 0 {
				k := min(m, len(dsts[i])-off)
				m, off = m-k, off+k
				if off == len(dsts[i]) {
					i, off = i+1, 0
				}
			}
			if rest > 0 && err != nil {
				return total, unexpectedEOF(err)
			}
			continue
		}
		if off == len(dsts[i]) {
			i, off = i+1, 0
		}
	}
	return total, nil
}

func isEmpty(p []byte) bool { return len(p) == 0 }

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
