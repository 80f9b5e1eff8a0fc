package tcp

import (
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"go.uber.org/zap"

	"github.com/kvconnect/kvconnect/auth"
	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/transports/tcp/internal/mcwire"
	"github.com/kvconnect/kvconnect/transports/tcp/internal/wire"
)

// readBufferSize is the socket read buffer. It only batches headers and
// small payloads: payloads at least this large are read straight into
// region memory.
const readBufferSize = 16 << 10

// targetConn serves requests from one initiator connection.
type targetConn struct {
	t   *Transport
	nc  net.Conn
	mc  *mcConn       // its entry in t.order, removed when it is not a Mooncake peer or ends
	dl  connDeadlines // its deadlines; the serving goroutine's
	raw *rawIO        // raw I/O on nc; nil where there is none (platform, or nc is not a socket)
	rw  io.ReadWriter // raw, or nc when raw is nil

	unsentTried bool // a Mooncake READ answer larger than mooncakeUnsent asked for nc's unsent bytes to be limited (same host only)
}

// The first read of a connection takes at most a Mooncake header: never
// more than either protocol's first header.
var _ [wire.HeaderSize - mcwire.HeaderSize]struct{}

func (t *Transport) acceptLoop(ln net.Listener) {
	defer t.wg.Done()
	backoff := time.Duration(0)
	for {
		nc, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// EMFILE, ENFILE, ENOBUFS, ECONNABORTED...: the listener is
			// fine; wait and accept again.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			t.warn.Warn("accept", "tcp: accept failed on the data port; retrying", zap.Error(err), zap.Duration("backoff", backoff))
			select {
			case <-time.After(backoff):
				continue
			case <-t.stop:
				return
			}
		}
		backoff = 0
		// Registered before its first byte is read, so a v1 READ elsewhere
		// waits for a WRITE it carries (mooncakeOrder).
		tc := &targetConn{t: t, nc: nc, mc: t.order.add(nc)}
		t.mu.Lock()
		if t.guard.Up(Name) != nil {
			t.mu.Unlock()
			t.order.remove(tc.mc)
			nc.Close()
			return
		}
		t.targets[tc] = struct{}{}
		t.dispatch(tc)
		t.mu.Unlock()
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

// serve serves tc until it ends, with raw (a server's, bound to tc.nc
// here) for raw I/O.
func (tc *targetConn) serve(raw *rawIO) {
	t := tc.t
	defer func() {
		raw.unbind()
		tc.nc.Close()
		t.order.remove(tc.mc)
		t.mu.Lock()
		delete(t.targets, tc)
		t.mu.Unlock()
	}()
	// One data port serves both protocols: kvconnect's frames start with
	// "KVCN", a Mooncake peer's with its request header. The first read
	// takes at least those four bytes and at most a Mooncake header, never
	// more than the first request's header, so a Mooncake connection's
	// unread input stays in its socket (see mooncakeOrder).
	if t.auth != nil && !tc.authenticate() {
		return
	}
	tc.rw = tc.nc
	if tc.raw = raw.bind(tc.nc); tc.raw != nil {
		tc.raw.onWait = tc
		tc.rw = tc.raw
	}
	var first [mcwire.HeaderSize]byte
	have, err := io.ReadAtLeast(tc.rw, first[:], 4)
	if err != nil {
		return
	}
	if auth.IsHello(first[:4]) {
		if t.auth != nil { // authenticated above: a second hello is a protocol error
			t.served.refusal(refBadRequest)
			t.log.Debug("tcp: refused a data connection that sent a second authentication hello", zap.String("remote", tc.nc.RemoteAddr().String()))
			return
		}
		t.served.refusal(refUnauthenticated)
		auth.Refuse(auth.Prefixed(first[4:have], tc.nc)) // tell a client with a secret that this node has none
		t.warn.Warn("auth-off", "tcp: refused a data connection that authenticates: this node has no auth_secret", zap.String("remote", tc.nc.RemoteAddr().String()))
		return
	}
	if !mcwire.IsKVConnect(first[:4]) {
		if !t.opts.Mooncake {
			t.served.refusal(refBadRequest)
			t.log.Debug("tcp: refusing a connection that does not speak kvconnect's framing (Mooncake peers are off: transports.tcp.mooncake)",
				zap.String("remote", tc.nc.RemoteAddr().String()))
			return
		}
		tc.serveMooncake(first, have)
		return
	}
	t.order.remove(tc.mc) // kvconnect's framing has its own acknowledgments
	// The first header is read unbuffered into a fixed array: the
	// connection's buffers are allocated once it sent a valid request,
	// so idle and garbage connections hold none.
	var hb [wire.HeaderSize]byte
	copy(hb[:], first[:have])
	if _, err := io.ReadFull(tc.rw, hb[have:]); err != nil {
		return
	}
	var fr *frameReader
	var fw *frameWriter
	defer func() {
		if fw != nil {
			fw.discard()
		}
	}()
	var h wire.Header
	var sc stateCheck
	var gs groupScratch
	for {
		if fr != nil {
			if len(fw.held) > 0 && fr.Buffered() < wire.HeaderSize {
				// Answers queued without a flush hold region memory (the
				// READs of a burst whose last request has not come, or of a
				// peer that never sets FlagFlush): send them before waiting
				// for a request, which may never come, so no deregistration
				// waits on the peer's next move.
				if err := fw.flush(); err != nil {
					return
				}
			}
			if err := tc.dl.readHeader(tc.nc, fr, hb[:]); err != nil {
				return // peer closed or connection broke
			}
		}
		if err := h.Decode(hb[:]); err != nil || h.Op.IsResponse() {
			if err == nil {
				err = fmt.Errorf("a %s frame sent as a request", h.Op)
			}
			t.served.refusal(refBadRequest)
			t.warn.Warn("malformed", "tcp: dropping a connection after a malformed request", zap.String("remote", tc.nc.RemoteAddr().String()), zap.Error(err))
			return
		}
		if fr == nil {
			fr, fw = newFrameReader(tc.nc), newFrameWriter(tc.nc)
			tc.boundFrames(fw)
			// An initiator that reads groups says so on every request
			// (wire.FlagGroups), and this target could answer it with
			// groups (fw.grouped); it does not: a burst of 64 KiB READs
			// answered with groups measured slower in the suite than
			// answered frame by frame, where the same change to WRITEs
			// measured faster (docs/DATAPATH-ROUNDS.md, twenty-fourth round).
		}
		if h.Op == wire.OpGroup {
			if !tc.group(fr, fw, &h, &sc, &gs) {
				return
			}
			continue
		}
		if !tc.request(fr, fw, &h, &sc) {
			return
		}
	}
}

// request serves one request whose header is h. False: the connection
// is to end.
func (tc *targetConn) request(fr *frameReader, fw *frameWriter, h *wire.Header, sc *stateCheck) bool {
	t := tc.t
	resp := wire.Header{ReqID: h.ReqID, Region: wire.FeatureGroups}
	switch h.Op {
	case wire.OpWrite:
		resp.Op = wire.OpWriteAck
		e, mem, err := t.regions.Resolve(h.Region, h.Offset, h.Length)
		if err != nil {
			resp.Status = statusFor(err)
			t.served.refuse(true, h.Length, err)
			if err := fr.discard(h.Length); err != nil {
				return false
			}
		} else {
			// A payload that is not buffered yet is read under a deadline,
			// so a peer that dies mid-write cannot hold the region (and a
			// Deregister waiting for it) until TCP keepalive gives up.
			if sc.due(h.Length) && abandoned(tc.nc) {
				// The initiator has failed this WRITE already.
				e.Release()
				t.served.op(true, resFailed, h.Length)
				return false
			}
			if uint64(fr.Buffered()) < h.Length {
				tc.dl.armRead(tc.nc, time.Duration(t.opts.OpTimeout))
			}
			_, err := fr.payload(mem)
			e.Release()
			if err != nil {
				t.served.op(true, resFailed, h.Length)
				return false
			}
			t.served.op(true, resCompleted, h.Length)
		}
		if err := fw.frame(&resp, nil, nil); err != nil {
			return false
		}
	case wire.OpRead:
		resp.Op = wire.OpReadResp
		e, mem, err := t.regions.Resolve(h.Region, h.Offset, h.Length)
		if err != nil {
			resp.Status = statusFor(err)
			t.served.refuse(false, h.Length, err)
			mem, e = nil, nil
		} else {
			resp.Length = h.Length
			t.served.op(false, resCompleted, h.Length) // before the data can reach the initiator
		}
		if err := fw.frame(&resp, mem, e); err != nil {
			return false
		}
	}
	// The initiator marks the last request of each burst: answer the
	// burst in one write.
	if h.Status&wire.FlagFlush != 0 {
		if err := fw.flush(); err != nil {
			return false
		}
	}
	return true
}
