package tcp

import (
	"context"
	"fmt"
	"net"
	"time"

	"go.uber.org/zap"

	"github.com/kvconnect/kvconnect/auth"
)

// With a keyring, every data connection starts with the auth exchange
// (package auth, purpose tcp-data): the dialer proves itself first, and
// the target serves nothing, reads nothing more, from a connection that
// failed it.

// prove runs the client side of the exchange on a new connection.
func (t *Transport) prove(ctx context.Context, nc net.Conn) error {
	if t.auth == nil {
		return nil
	}
	dl := time.Now().Add(auth.Timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(dl) {
		dl = d
	}
	nc.SetDeadline(dl)
	if err := t.auth.Prove(nc, auth.PurposeTCPData); err != nil {
		return fmt.Errorf("tcp: authenticating the data connection: %w", err)
	}
	nc.SetDeadline(time.Time{})
	return nil
}

// authenticate runs the server side on an accepted connection and says
// whether to serve it.
func (tc *targetConn) authenticate() bool {
	tc.nc.SetDeadline(time.Now().Add(auth.Timeout))
	if err := tc.t.auth.Accept(tc.nc, auth.PurposeTCPData); err != nil {
		tc.t.served.refusal(refUnauthenticated)
		tc.t.warn.Warn("auth", "tcp: refused a data connection that failed authentication", zap.String("remote", tc.nc.RemoteAddr().String()), zap.Error(err))
		return false
	}
	tc.nc.SetDeadline(time.Time{})
	return true
}
