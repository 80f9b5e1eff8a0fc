package connector

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/kvconnect/kvconnect/auth"
)

// request sends one handshake request to session and returns the reply,
// as Mooncake's client does: one frame out, one frame back (of the same
// type), then close. With auth on, the exchange (package auth) runs
// first, and a peer that cannot prove the secret gets no request. The
// reply's memory comes from the node's handshake budget
// (max_handshake_memory), waiting for room within ctx: the caller
// releases it once done with the body.
func (c *Connector) request(ctx context.Context, session string, typ byte, body []byte) (*received, error) {
	max := c.cfg.MaxHandshakeFrame
	addr, err := c.rpcAddress(ctx, session)
	if err != nil {
		return nil, err
	}
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		// %w: a *net.DNSError stays visible (the C library answers -101
		// for a name that does not resolve).
		return nil, fmt.Errorf("connector: handshake with %s: %w: %w", session, err, ErrPeerUnreachable)
	}
	defer nc.Close()
	dl, _ := ctx.Deadline()
	nc.SetDeadline(dl)
	stop := context.AfterFunc(ctx, func() { nc.SetDeadline(time.Now()) })
	defer stop()
	if c.auth != nil {
		if adl := time.Now().Add(auth.Timeout); dl.IsZero() || adl.Before(dl) {
			nc.SetDeadline(adl)
		}
		err := c.auth.Prove(nc, auth.PurposeHandshake)
		nc.SetDeadline(dl)
		if ctx.Err() != nil { // cancelled meanwhile: AfterFunc's deadline must hold
			nc.SetDeadline(time.Now())
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil, handshakeIOError(ctx, session, err)
			}
			return nil, fmt.Errorf("connector: handshake with %s: %w", session, err)
		}
	}
	if err := writeFrame(nc, typ, body); err != nil {
		return nil, handshakeIOError(ctx, session, err)
	}
	f, err := c.frames.readFrame(ctx, nc, max, false)
	if err != nil {
		if errors.Is(err, ErrProtocol) || errors.Is(err, ErrResourceExhausted) {
			return nil, fmt.Errorf("connector: handshake with %s: %w", session, err)
		}
		return nil, handshakeIOError(ctx, session, err)
	}
	switch f.typ {
	case typ:
		return f, nil
	case frameError:
		defer f.release()
		var er errorReply
		if err := json.Unmarshal(f.body, &er); err != nil {
			return nil, fmt.Errorf("connector: handshake with %s: malformed error reply: %w", session, ErrProtocol)
		}
		return nil, remoteError(session, er)
	}
	f.release()
	return nil, fmt.Errorf("connector: handshake with %s: reply type %d to request type %d: %w", session, f.typ, typ, ErrProtocol)
}

func handshakeIOError(ctx context.Context, session string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("connector: handshake with %s: %w", session, contextError(ctx.Err()))
	}
	return fmt.Errorf("connector: handshake with %s: %v: %w", session, err, ErrPeerUnreachable)
}

// mark is the kvconnect member of this node's request bodies.
func (c *Connector) mark() *kvconnectMark {
	return &kvconnectMark{Version: descriptorVersion, Session: c.session}
}
