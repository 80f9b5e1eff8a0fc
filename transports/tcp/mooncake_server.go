package tcp

import (
	"io"
	"net"
	"time"

	"go.uber.org/zap"

	"github.com/kvconnect/kvconnect/transports/tcp/internal/mcwire"
)

// serveMooncake answers an unmodified Mooncake Transfer Engine peer on
// one connection: requests one after another, each checked against the
// registered regions by absolute address before memory is touched. A bad
// request is rejected (v2: status "address rejected", v1: nothing) and
// the connection closed, as Mooncake's own server does.
//
// Headers are read straight from the socket, never ahead of the request
// being served, so a v1 READ can wait for the other connections' WRITEs
// that arrived before it (mooncakeOrder).
func (tc *targetConn) serveMooncake(first [4]byte) {
	t := tc.t
	remote := tc.nc.RemoteAddr().String()
	mc := tc.mc
	t.served.mooncake.Add(1)
	var hb [mcwire.HeaderSize]byte
	var sb [mcwire.StatusSize]byte
	copy(hb[:], first[:])
	have := len(first)
	var sc stateCheck
	// Raw system calls where the platform has them (rawIO: no runtime
	// monitor woken per request).
	var rw io.ReadWriter = tc.nc
	if r := newRawIO(tc.nc); r != nil {
		rw = r
	}
	tc.rw = rw
	for {
		if err := tc.dl.readHeader(tc.nc, rw, hb[have:]); err != nil {
			return // the peer closed (pool off: after each request)
		}
		have = 0
		h, err := mcwire.Decode(hb[:])
		var mem []byte
		var release func()
		if err == nil {
			e, m, rerr := t.regions.Resolve(0, h.Addr, h.Size)
			if rerr != nil {
				err = rerr
			} else {
				mem, release = m, e.Release
			}
		}
		if err != nil {
			t.served.refuse(h.Write, h.Size, err)
			t.warn.Info("mooncake-reject", "tcp: rejected a Mooncake request outside the registered regions", zap.String("remote", remote), zap.Uint64("addr", h.Addr),
				zap.Uint64("size", h.Size), zap.Bool("write", h.Write), zap.Error(err))
			if h.V2 {
				mcwire.EncodeStatus(&sb, mcwire.StatusRejected)
				tc.nc.SetWriteDeadline(time.Now().Add(time.Duration(t.opts.OpTimeout)))
				tc.nc.Write(sb[:])
			}
			return
		}
		// A connection's first request is always looked at (pool off:
		// every request); on a pooled one, at most once a millisecond.
		if h.Write && sc.due() && (peerReset(tc.nc) || (h.V2 && abandoned(tc.nc))) {
			// The initiator gave up on this WRITE before it was read (this
			// process was stopped, say): it has failed there, and applying
			// it now would overwrite what was written since. A v2 client
			// waits for the WRITE's status, so any close before it is a
			// give-up; a v1 client closes (FIN) right after sending, so
			// only a reset is (kvconnect's initiator resets a lane it
			// gives up on).
			release()
			t.served.op(true, resFailed, h.Size)
			t.warn.Info("mooncake-abandoned", "tcp: dropped a Mooncake WRITE whose initiator had closed the connection before it was read",
				zap.String("remote", remote), zap.Uint64("addr", h.Addr), zap.Uint64("size", h.Size))
			return
		}
		if h.Write {
			mc.writing.Store(true)
		} else if !h.V2 {
			t.order.waitForWrites(mc, time.Duration(t.opts.OpTimeout))
		}
		ok := tc.mooncakeBody(h, mem, &sb)
		if h.Write {
			mc.writing.Store(false)
			t.order.wrote()
		}
		release()
		if !ok {
			return
		}
	}
}

// mooncakeBody moves one request's payload; false ends the connection.
func (tc *targetConn) mooncakeBody(h mcwire.Header, mem []byte, sb *[mcwire.StatusSize]byte) bool {
	timeout := time.Duration(tc.t.opts.OpTimeout)
	mcwire.EncodeStatus(sb, mcwire.StatusOK)
	if h.Write {
		// The payload is read under op_timeout, so a peer that stalls
		// mid-write cannot hold the region (and a Deregister) forever.
		tc.dl.armRead(tc.nc, timeout)
		_, err := io.ReadFull(tc.rw, mem)
		if err != nil {
			tc.t.served.op(true, resFailed, h.Size)
			return false
		}
		tc.t.served.op(true, resCompleted, h.Size) // before the v2 status can reach the initiator
		if h.V2 {
			tc.dl.armWrite(tc.nc, timeout)
			if _, err := tc.rw.Write(sb[:]); err != nil {
				return false
			}
		}
		return true
	}
	tc.t.served.op(false, resCompleted, h.Size) // before the data can reach the initiator
	out := net.Buffers{mem}
	if h.V2 {
		out = net.Buffers{sb[:], mem}
	}
	tc.dl.armWrite(tc.nc, timeout)
	_, err := out.WriteTo(tc.nc)
	return err == nil
}
