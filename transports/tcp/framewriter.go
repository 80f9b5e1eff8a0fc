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
	// 1.19/1.27/1.18 GB/s copying, 1.32/1.46/1.37 not (docs/DATAPATH.md).
	smallPayload = 4 << 10
	// maxPendingBytes and maxPendingPieces bound what a frameWriter holds
	// before it writes on its own.
	maxPendingBytes  = 4 << 20
	maxPendingPieces = 256
)

// frameWriter queues frames and writes them with one writev per flush:
// headers and small payloads are copied into a buffer, large payloads are
// sent straight from their memory. A caller flushes at the end of a burst
// (the initiator after each pass over its queue, the target when a request
// carries wire.FlagFlush).
type frameWriter struct {
	nc      net.Conn
	raw     *rawIO // nil: nc's own writev
	buf     []byte // fixed capacity: slices of it sit in iov until the flush
	mark    int    // buf[mark:] is not in iov yet
	iov     [][]byte
	bufs    net.Buffers
	pending int
	held    []*regions.Entry // regions whose memory is in iov
}

func newFrameWriter(nc net.Conn) *frameWriter {
	return &frameWriter{nc: nc, raw: newRawIO(nc), buf: make([]byte, 0, writeBufferSize)}
}

// frame queues a header and its payload. hold, if not nil, is the region
// the payload lives in: it is released once the payload has been copied or
// written (or the writer is discarded).
func (w *frameWriter) frame(h *wire.Header, payload []byte, hold *regions.Entry) error {
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

// flush writes everything queued.
func (w *frameWriter) flush() error {
	if w.mark < len(w.buf) {
		w.iov = append(w.iov, w.buf[w.mark:])
	}
	var err error
	switch {
	case len(w.iov) == 0:
	case w.raw != nil:
		err = w.raw.Writev(w.iov)
	default:
		w.bufs = w.iov
		_, err = w.bufs.WriteTo(w.nc)
	}
	w.reset()
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
	for i, e := range w.held {
		e.Release()
		w.held[i] = nil
	}
	w.held = w.held[:0]
}
