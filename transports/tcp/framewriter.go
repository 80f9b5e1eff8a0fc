package tcp

import (
	"net"

	"github.com/kvconnect/kvconnect/plugins/regions"
	"github.com/kvconnect/kvconnect/transports/tcp/internal/wire"
)

const (
	// writeBufferSize holds headers and small payloads between flushes.
	writeBufferSize = 64 << 10
	// smallPayload is the largest payload copied into the write buffer;
	// larger payloads go to the socket straight from region memory. At
	// 16 KiB (vLLM's smaller blocks) the copy cost more than the iovec it
	// saves: 16 KiB x 128 x 4 WRITE through the plugin, same run,
	// 1.19/1.27/1.18 GB/s copying, 1.32/1.46/1.37 not (docs/DATAPATH-ROUNDS.md).
	smallPayload = 4 << 10
	// maxPendingBytes and maxPendingPieces bound what a frameWriter holds
	// before it writes on its own.
	maxPendingBytes  = 4 << 20
	maxPendingPieces = 256
)

// frameWriter queues frames and writes them with one writev per flush:
// headers and small payloads are copied into a buffer, large payloads are
// sent straight from their memory. To a peer that reads groups the
// frames of a flush go out as one group instead, every header first and
// no payload copied, so the peer reads all the payloads with a readv or
// a few. A caller flushes at the end of a burst (the initiator after each
// pass over its queue, the target when a request carries wire.FlagFlush).
type frameWriter struct {
	nc      net.Conn
	raw     *rawIO // nil: nc's own writev
	buf     []byte // fixed capacity: slices of it sit in iov until the flush
	mark    int    // buf[mark:] is not in iov yet
	iov     [][]byte
	bufs    net.Buffers
	pending int
	held    []*regions.Entry // regions whose memory is in iov (or gpay)
	flushes uint64           // flushes so far: what was queued before one is no longer read
	// bound, if set, is called before each write: a target bounds its
	// answers' writes there (targetConn.boundFrames).
	bound func()

	// grouped: the peer reads groups (wire's package comment), so what
	// is queued goes out per flush as one group, the headers first. Set
	// only while nothing is queued.
	grouped bool
	gtab    []byte   // a group header's room, then the queued frames' headers
	gpay    [][]byte // their payloads, in order, not copied
}

func newFrameWriter(nc net.Conn) *frameWriter {
	return &frameWriter{nc: nc, raw: newRawIO(nc), buf: make([]byte, 0, writeBufferSize)}
}

// frame queues a header and its payload. hold, if not nil, is the region
// the payload lives in: it is released once the payload has been copied or
// written (or the writer is discarded).
func (w *frameWriter) frame(h *wire.Header, payload []byte, hold *regions.Entry) error {
	if w.grouped {
		return w.groupFrame(h, payload, hold)
	}
	if len(w.buf)+wire.HeaderSize+smallPayload > cap(w.buf) {
		if err := w.flush(); err != nil {
			if hold != nil {
				hold.Release()
			}
			return err
		}
	}
	n := len(w.buf)
	w.buf = w.buf[:n+wire.HeaderSize]
	h.Encode(w.buf[n:])
	w.pending += wire.HeaderSize + len(payload)
	switch {
	case len(payload) == 0:
		if hold != nil {
			hold.Release()
		}
	case len(payload) <= smallPayload:
		w.buf = append(w.buf, payload...)
		if hold != nil {
			hold.Release()
		}
	default:
		w.iov = append(w.iov, w.buf[w.mark:len(w.buf)], payload)
		w.mark = len(w.buf)
		if hold != nil {
			w.held = append(w.held, hold)
		}
	}
	if w.pending >= maxPendingBytes || len(w.iov) >= maxPendingPieces {
		return w.flush()
	}
	return nil
}

// groupFrame is frame for a peer that reads groups.
func (w *frameWriter) groupFrame(h *wire.Header, payload []byte, hold *regions.Entry) error {
	if len(w.gtab) == 0 {
		if w.gtab == nil {
			w.gtab = make([]byte, 0, (1+wire.MaxGroup)*wire.HeaderSize)
		}
		w.gtab = w.gtab[:wire.HeaderSize] // the group header's room
	} else if len(w.gtab) == cap(w.gtab) {
		if err := w.flush(); err != nil {
			if hold != nil {
				hold.Release()
			}
			return err
		}
		w.gtab = w.gtab[:wire.HeaderSize]
	}
	n := len(w.gtab)
	w.gtab = w.gtab[:n+wire.HeaderSize]
	h.Encode(w.gtab[n:])
	w.pending += wire.HeaderSize + len(payload)
	if len(payload) > 0 {
		w.gpay = append(w.gpay, payload)
	}
	if hold != nil {
		if len(payload) > 0 {
			w.held = append(w.held, hold)
		} else {
			hold.Release()
		}
	}
	if w.pending >= maxPendingBytes {
		return w.flush()
	}
	return nil
}

// groupIov lays out what groupFrame queued: frames without payloads
// back to back, one frame as it is, else a group.
func (w *frameWriter) groupIov() {
	frames := len(w.gtab)/wire.HeaderSize - 1
	switch {
	case frames <= 0:
		return
	case len(w.gpay) == 0 || frames == 1:
		w.iov = append(w.iov, w.gtab[wire.HeaderSize:])
	default:
		g := wire.GroupHeader(frames)
		g.Encode(w.gtab)
		w.iov = append(w.iov, w.gtab)
	}
	w.iov = append(w.iov, w.gpay...)
}

// flush writes everything queued.
func (w *frameWriter) flush() error {
	if w.grouped {
		w.groupIov()
	} else if w.mark < len(w.buf) {
		w.iov = append(w.iov, w.buf[w.mark:])
	}
	var err error
	if w.bound != nil && len(w.iov) > 0 {
		w.bound()
	}
	switch {
	case len(w.iov) == 0:
	case w.raw != nil:
		err = w.raw.Writev(w.iov)
	default:
		w.bufs = w.iov
		_, err = w.bufs.WriteTo(w.nc)
	}
	w.reset()
	w.flushes++
	return err
}

// discard drops what is queued (the connection is going away) and
// releases the regions it held.
func (w *frameWriter) discard() { w.reset() }

func (w *frameWriter) reset() {
	clear(w.iov)
	w.iov = w.iov[:0]
	w.bufs = nil
	w.buf = w.buf[:0]
	w.mark, w.pending = 0, 0
	clear(w.gpay)
	w.gpay, w.gtab = w.gpay[:0], w.gtab[:0]
	for i, e := range w.held {
		e.Release()
		w.held[i] = nil
	}
	w.held = w.held[:0]
}
