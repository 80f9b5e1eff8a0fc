package tcp

import (
	"bufio"
	"errors"
	"io"
	"net"

	"go.uber.org/zap"

	"github.com/kvconnect/kvconnect/internal/wire"
	"github.com/kvconnect/kvconnect/plugins"
)

// readBufferSize is the socket read buffer. It only batches headers and
// small payloads: payloads at least this large are read straight into
// region memory.
const readBufferSize = 16 << 10

// writeBufferSize batches headers and small payloads into one write.
const writeBufferSize = 64 << 10

// smallPayload is the largest payload copied into the write buffer; larger
// payloads go to the socket straight from region memory with writev.
const smallPayload = 16 << 10

// frameWriter writes frames, coalescing headers and small payloads and
// sending large payloads straight from their memory with writev.
type frameWriter struct {
	nc   net.Conn
	buf  []byte
	arr  [2][]byte
	bufs net.Buffers
}

func newFrameWriter(nc net.Conn) *frameWriter {
	return &frameWriter{nc: nc, buf: make([]byte, 0, writeBufferSize)}
}

// frame queues a header and its payload; large payloads are written
// immediately together with everything queued before them.
func (w *frameWriter) frame(h *wire.Header, payload []byte) error {
	if len(w.buf)+wire.HeaderSize > cap(w.buf) {
		if err := w.flush(); err != nil {
			return err
		}
	}
	n := len(w.buf)
	w.buf = w.buf[:n+wire.HeaderSize]
	h.Encode(w.buf[n:])
	if len(payload) == 0 {
		return nil
	}
	if len(payload) <= smallPayload && len(w.buf)+len(payload) <= cap(w.buf) {
		w.buf = append(w.buf, payload...)
		return nil
	}
	w.arr[0], w.arr[1] = w.buf, payload
	w.bufs = w.arr[:]
	_, err := w.bufs.WriteTo(w.nc)
	w.arr[0], w.arr[1] = nil, nil
	w.buf = w.buf[:0]
	return err
}

func (w *frameWriter) flush() error {
	if len(w.buf) == 0 {
		return nil
	}
	_, err := w.nc.Write(w.buf)
	w.buf = w.buf[:0]
	return err
}

// targetConn serves requests from one initiator connection.
type targetConn struct {
	t  *Transport
	nc net.Conn
}

func (t *Transport) acceptLoop(ln net.Listener) {
	defer t.wg.Done()
	for {
		nc, err := ln.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				t.log.Warn("tcp: accept failed; data listener stopped", zap.Error(err))
			}
			return
		}
		tc := &targetConn{t: t, nc: nc}
		t.mu.Lock()
		if t.state != stateUp {
			t.mu.Unlock()
			nc.Close()
			return
		}
		t.targets[tc] = struct{}{}
		t.wg.Add(1)
		t.mu.Unlock()
		go tc.serve()
	}
}

func statusFor(err error) wire.Status {
	switch {
	case errors.Is(err, plugins.ErrOutOfBounds):
		return wire.StatusOutOfBounds
	case errors.Is(err, plugins.ErrUnknownRegion):
		return wire.StatusUnknownRegion
	}
	return wire.StatusBadRequest
}

func (tc *targetConn) serve() {
	t := tc.t
	defer t.wg.Done()
	defer func() {
		tc.nc.Close()
		t.mu.Lock()
		delete(t.targets, tc)
		t.mu.Unlock()
	}()
	br := bufio.NewReaderSize(tc.nc, readBufferSize)
	fw := newFrameWriter(tc.nc)
	var hb [wire.HeaderSize]byte
	var h wire.Header
	for {
		if br.Buffered() == 0 {
			// About to block on the socket: send the answers queued so far.
			if err := fw.flush(); err != nil {
				return
			}
		}
		if _, err := io.ReadFull(br, hb[:]); err != nil {
			return // peer closed or connection broke
		}
		if err := h.Decode(hb[:]); err != nil || h.Op.IsResponse() {
			t.log.Warn("tcp: dropping connection after a malformed request", zap.String("remote", tc.nc.RemoteAddr().String()), zap.Error(err), zap.Stringer("op", h.Op))
			return
		}
		resp := wire.Header{ReqID: h.ReqID}
		switch h.Op {
		case wire.OpWrite:
			resp.Op = wire.OpWriteAck
			e, mem, err := t.regions.Resolve(h.Region, h.Offset, h.Length)
			if err != nil {
				resp.Status = statusFor(err)
				if _, err := io.CopyN(io.Discard, br, int64(h.Length)); err != nil {
					return
				}
			} else {
				_, err := io.ReadFull(br, mem)
				e.Release()
				if err != nil {
					return
				}
			}
			if err := fw.frame(&resp, nil); err != nil {
				return
			}
		case wire.OpRead:
			resp.Op = wire.OpReadResp
			e, mem, err := t.regions.Resolve(h.Region, h.Offset, h.Length)
			if err != nil {
				resp.Status = statusFor(err)
				if err := fw.frame(&resp, nil); err != nil {
					return
				}
				continue
			}
			resp.Length = h.Length
			err = fw.frame(&resp, mem)
			e.Release()
			if err != nil {
				return
			}
		}
	}
}
