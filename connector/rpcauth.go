package connector

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"time"

	"go.uber.org/zap"

	"github.com/kvconnect/kvconnect/auth"
	"github.com/kvconnect/kvconnect/metrics"
)

// open starts serving a handshake connection: with auth on, the client
// must pass the exchange (package auth) before its request is read; with
// auth off, a client that tries to authenticate is told so. It returns
// where to read the request from, or false when the connection is done.
func (s *rpcServer) open(nc net.Conn) (io.Reader, bool) {
	remote := zap.String("remote", nc.RemoteAddr().String())
	var first [len(auth.Magic)]byte
	if n, err := io.ReadFull(nc, first[:]); err != nil {
		s.warn.Info("bad-request", "dropped a handshake connection that sent no complete request", remote, zap.Int("bytes", n), zap.Error(err))
		return nil, false
	}
	hello := auth.IsHello(first[:])
	k := s.c.auth
	switch {
	case k == nil && hello:
		s.c.observe().HandshakeRefused(metrics.HandshakeUnauthenticated)
		auth.Refuse(nc)
		s.warn.Warn("auth-off", "refused a handshake connection that authenticates: this node has no auth_secret", remote)
		return nil, false
	case k == nil:
		return io.MultiReader(bytes.NewReader(first[:]), nc), true
	case !hello:
		s.c.observe().HandshakeRefused(metrics.HandshakeUnauthenticated)
		// Say why in a frame a kvconnect client reads as an error, then
		// close without reading the request.
		s.replyError(nc, fmt.Errorf("connector: node %s requires authentication (auth_secret) and this request did not authenticate: %w", s.c.session, ErrUnauthenticated))
		s.warn.Warn("auth-missing", "refused a handshake connection that did not authenticate", remote)
		lingerClose(nc)
		return nil, false
	}
	if err := k.Accept(auth.Prefixed(first[:], nc), auth.PurposeHandshake); err != nil {
		s.c.observe().HandshakeRefused(metrics.HandshakeUnauthenticated)
		s.warn.Warn("auth", "refused a handshake connection that failed authentication", remote, zap.Error(err))
		return nil, false
	}
	return nc, true
}

// lingerClose lets the reply just written reach a client that is still
// sending (closing with unread input would reset the connection and
// could lose the reply): it stops writing, discards what arrives for a
// moment, then closes.
func lingerClose(nc net.Conn) {
	if tc, ok := nc.(*net.TCPConn); ok {
		tc.CloseWrite()
	}
	nc.SetReadDeadline(time.Now().Add(time.Second))
	io.Copy(io.Discard, io.LimitReader(nc, 1<<20))
}
