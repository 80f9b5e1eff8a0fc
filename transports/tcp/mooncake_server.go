package tcp

import (
	"errors"
	"io"
	"net"
	"time"

	"go.uber.org/zap"

	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/transports/tcp/internal/mcwire"
	"github.com/kvconnect/kvconnect/transports/tcp/internal/wire"
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
func (tc *targetConn) serveMooncake(first [mcwire.HeaderSize]byte, have int) {
	t := tc.t
	mc := tc.mc
	t.served.mooncake.Add(1)
	hb := first
	var sb [mcwire.StatusSize]byte
	var sc stateCheck
	for {
		boundary := have == 0
		if err := tc.dl.readHeader(tc.nc, tc.rw, hb[have:]); err != nil {
			if boundary && errors.Is(err, io.EOF) && tc.raw != nil && t.opts.MooncakeResetOnClose {
				// The peer closed after its last request (pool off: after
				// each): no TIME-WAIT for either side (see Options).
				tc.raw.resetOnClose()
			}
			return
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
			t.warn.Info("mooncake-reject", "tcp: rejected a Mooncake request outside the registered regions", zap.Stringer("remote", tc.nc.RemoteAddr()), zap.Uint64("addr", h.Addr),
				zap.Uint64("size", h.Size), zap.Bool("write", h.Write), zap.Error(err))
			if h.V2 {
				mcwire.EncodeStatus(&sb, mcwire.StatusRejected)
				tc.nc.SetWriteDeadline(time.Now().Add(time.Duration(t.opts.OpTimeout)))
				tc.nc.Write(sb[:])
				if h.Write && h.Size <= wire.MaxLength && (errors.Is(err, plugins.ErrUnknownRegion) || errors.Is(err, plugins.ErrOutOfBounds)) {
					// Take the payload the client is still sending (bounded:
					// one chunk at most, within op_timeout) before closing:
					// a close with unread bytes resets the connection, and
					// the client would report it broken, not the rejection.
					tc.nc.SetReadDeadline(time.Now().Add(time.Duration(t.opts.OpTimeout)))
					io.CopyN(io.Discard, tc.rw, int64(h.Size))
				}
			}
			return
		}
		// A connection's first request is always looked at (pool off:
		// every request); on a pooled one, at most once a millisecond.
		if h.Write && sc.due(h.Size) && tc.gaveUp(h.V2) {
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
				zap.Stringer("remote", tc.nc.RemoteAddr()), zap.Uint64("addr", h.Addr), zap.Uint64("size", h.Size))
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

// gaveUp reports whether the initiator of the WRITE just read gave up
// on it: a v2 client waits for the WRITE's status, so any close before
// it is a give-up; a v1 client closes (FIN) right after sending, so only
// a reset is (kvconnect's initiator resets a lane it gives up on). One
// look at the socket's state, a raw system call.
func (tc *targetConn) gaveUp(v2 bool) bool {
	if tc.raw == nil {
		return false
	}
	closed, reset := tc.raw.peerClosed()
	return reset || (v2 && closed)
}

// mooncakeUnsent is the most a Mooncake READ's answer leaves written to
// its socket but not yet sent (TCP_NOTSENT_LOWAT, set on a connection
// when it first answers a READ larger than this). Queued beyond the
// peer's window, the rest of an answer is sent by the kernel as the
// peer's acknowledgments arrive; with the peer on this host (loopback:
// prefill and decode on one machine, and every benchmark here), that is
// in the peer's own thread, its receive call processing our segments
// too. A Mooncake initiator's one I/O thread spent a quarter of its time
// so, beside a third copying, against a target that does not queue
// ahead (docs/DATAPATH-ROUNDS.md, eighteenth round). Limited, the target sends
// each piece itself when the window opens: more wake-ups here, fewer
// cycles there. Only for a peer on this host: across a network the
// kernel sends on acknowledgments in this host's own softirq, and on a
// fast link a 64 KiB limit would leave the writer a few µs to refill it
// before the link idles.
const mooncakeUnsent = 64 << 10

// sameHost reports whether a connection's two ends are on this host:
// the peer is a loopback address, or the same address as ours (a node
// that dials its own outward address is routed through loopback too).
func sameHost(local, remote net.Addr) bool {
	l, lok := local.(*net.TCPAddr)
	r, rok := remote.(*net.TCPAddr)
	if !lok || !rok {
		return false
	}
	return r.IP.IsLoopback() || r.IP.Equal(l.IP)
}

// mooncakeBody moves one request's payload; false ends the connection.
//
// The payload read and the answer's write are bounded by op_timeout, so a
// peer that stalls mid-way cannot hold the region (and a Deregister)
// forever. With raw I/O a call arms that deadline only if it must wait
// (boundRead, boundWrite): the request of a fresh connection (pool off:
// every request) usually is in the socket whole, and its answer fits
// in the socket's buffer, so it costs no runtime timer.
func (tc *targetConn) mooncakeBody(h mcwire.Header, mem []byte, sb *[mcwire.StatusSize]byte) bool {
	mcwire.EncodeStatus(sb, mcwire.StatusOK)
	if h.Write {
		tc.boundRead()
		_, err := io.ReadFull(tc.rw, mem)
		tc.unbound()
		if err != nil {
			tc.t.served.op(true, resFailed, h.Size)
			return false
		}
		tc.t.served.op(true, resCompleted, h.Size) // before the v2 status can reach the initiator
		if h.V2 {
			tc.boundWrite()
			_, err := tc.rw.Write(sb[:])
			tc.unbound()
			if err != nil {
				return false
			}
		}
		return true
	}
	tc.t.served.op(false, resCompleted, h.Size) // before the data can reach the initiator
	out := [2][]byte{mem}
	n := 1
	if h.V2 {
		out, n = [2][]byte{sb[:], mem}, 2
	}
	if tc.raw != nil && !tc.unsentTried && len(mem) > mooncakeUnsent {
		tc.unsentTried = true
		if sameHost(tc.nc.LocalAddr(), tc.nc.RemoteAddr()) {
			tc.raw.limitUnsent(mooncakeUnsent)
		}
	}
	tc.boundWrite()
	defer tc.unbound()
	if tc.raw != nil {
		return tc.raw.Writev(out[:n]) == nil
	}
	bufs := net.Buffers(out[:n])
	_, err := bufs.WriteTo(tc.nc)
	return err == nil
}

// boundRead bounds the payload read that follows by op_timeout: at once
// when a read deadline is set already (moved when less than half of it is
// left: connDeadlines), else, with raw I/O, only once the read must wait
// (armOnWait). unbound ends it.
func (tc *targetConn) boundRead() {
	if tc.raw != nil && tc.dl.read.IsZero() {
		tc.raw.armR = true
		return
	}
	tc.dl.armRead(tc.nc, time.Duration(tc.t.opts.OpTimeout))
}

// boundWrite is boundRead for the answer's write.
func (tc *targetConn) boundWrite() {
	if tc.raw != nil && tc.dl.write.IsZero() {
		tc.raw.armW = true
		return
	}
	tc.dl.armWrite(tc.nc, time.Duration(tc.t.opts.OpTimeout))
}

// unbound drops a lazy bound the call did not need: the next header read
// is not bounded.
func (tc *targetConn) unbound() {
	if tc.raw != nil {
		tc.raw.armR, tc.raw.armW = false, false
	}
}

// armOnWait arms the deadline of a payload read (write false) or of an
// answer's write that must wait for the socket (rawIO.onWait).
func (tc *targetConn) armOnWait(write bool) {
	span := time.Duration(tc.t.opts.OpTimeout)
	if write {
		tc.dl.armWrite(tc.nc, span)
	} else {
		tc.dl.armRead(tc.nc, span)
	}
}
