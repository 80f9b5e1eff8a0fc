package tcp

import (
	"bufio"
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
func (tc *targetConn) serveMooncake(br *bufio.Reader) {
	t := tc.t
	remote := tc.nc.RemoteAddr().String()
	var hb [mcwire.HeaderSize]byte
	var sb [mcwire.StatusSize]byte
	for {
		if _, err := io.ReadFull(br, hb[:]); err != nil {
			return // the peer closed (pool off: after each request)
		}
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
			t.log.Debug("tcp: rejecting a Mooncake request", zap.String("remote", remote), zap.Uint64("addr", h.Addr),
				zap.Uint64("size", h.Size), zap.Bool("write", h.Write), zap.Error(err))
			if h.V2 {
				mcwire.EncodeStatus(&sb, mcwire.StatusRejected)
				tc.nc.SetWriteDeadline(time.Now().Add(time.Duration(t.opts.OpTimeout)))
				tc.nc.Write(sb[:])
			}
			return
		}
		ok := tc.mooncakeBody(br, h, mem, &sb)
		release()
		if !ok {
			return
		}
	}
}

// mooncakeBody moves one request's payload; false ends the connection.
func (tc *targetConn) mooncakeBody(br *bufio.Reader, h mcwire.Header, mem []byte, sb *[mcwire.StatusSize]byte) bool {
	timeout := time.Duration(tc.t.opts.OpTimeout)
	mcwire.EncodeStatus(sb, mcwire.StatusOK)
	if h.Write {
		// The payload is read under op_timeout, so a peer that stalls
		// mid-write cannot hold the region (and a Deregister) forever.
		tc.nc.SetReadDeadline(time.Now().Add(timeout))
		_, err := io.ReadFull(br, mem)
		tc.nc.SetReadDeadline(time.Time{})
		if err != nil {
			return false
		}
		if h.V2 {
			tc.nc.SetWriteDeadline(time.Now().Add(timeout))
			if _, err := tc.nc.Write(sb[:]); err != nil {
				return false
			}
			tc.nc.SetWriteDeadline(time.Time{})
		}
		return true
	}
	out := net.Buffers{mem}
	if h.V2 {
		out = net.Buffers{sb[:], mem}
	}
	tc.nc.SetWriteDeadline(time.Now().Add(timeout))
	_, err := out.WriteTo(tc.nc)
	tc.nc.SetWriteDeadline(time.Time{})
	return err == nil
}
