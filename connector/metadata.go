package connector

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/kvconnect/kvconnect/metadata"
)

// With a metadata service (metadata: etcd://, redis://, http://), the
// node publishes its segment descriptor and RPC location under its
// session id (package metadata: Mooncake's key layout, under a lease), and
// Open resolves peers' descriptors there instead of asking their RPC
// ports. The descriptor is published again whenever it changes (regions
// registered or freed, a transport restarted), coalesced by one goroutine.
// A peer whose key disappears (it closed, or died and its lease expired)
// is gone: batches to it fail at once saying so, and at most once a
// second one looks the key up again, so a restarted peer is reached again.

// metaState is the node's side of its metadata service.
type metaState struct {
	svc   metadata.Service
	keys  metadata.Keys
	dirty chan struct{} // publish again
	// lookups remembers when a gone peer's key was last looked up.
	mu      sync.Mutex
	lookups map[string]time.Time
}

// goneRetry is how often a gone peer's key is looked up again.
const goneRetry = time.Second

// openMetadata connects to the configured metadata service, if any. It
// fails within connect_timeout naming every endpoint.
func (c *Connector) openMetadata(ctx context.Context) error {
	o, ok := c.cfg.MetadataOptions(c.log)
	if !ok {
		return nil
	}
	svc, err := metadata.Open(ctx, o)
	if err != nil {
		return fmt.Errorf("connector: metadata (%s): %w", metadata.Redact(c.cfg.Metadata), err)
	}
	c.meta = &metaState{svc: svc, keys: metadata.NewKeys(c.cfg.MetadataClusterID), dirty: make(chan struct{}, 1), lookups: map[string]time.Time{}}
	return nil
}

// startPublishing publishes the descriptor now and starts the goroutine
// that publishes it again when it changes.
func (c *Connector) startPublishing(ctx context.Context) {
	if c.meta == nil {
		return
	}
	if err := c.publish(ctx); err != nil {
		c.log.Warn("publishing this node's descriptor failed; it is written when the metadata service answers again", zap.Error(err))
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		for {
			select {
			case <-c.closing:
				return
			case <-c.meta.dirty:
			}
			// Shutdown does not wait for a publish to a slow or unreachable
			// service: closing ends it (closing the service then waits for
			// it, and deletes the keys within Shutdown's ctx).
			ctx, cancel := context.WithTimeout(context.Background(), c.cfg.ConnectTimeout)
			go func() {
				select {
				case <-c.closing:
					cancel()
				case <-ctx.Done():
				}
			}()
			if err := c.publish(ctx); err != nil && !errors.Is(ctx.Err(), context.Canceled) {
				c.log.Warn("publishing this node's descriptor failed; it is written when the metadata service answers again", zap.Error(err))
			}
			cancel()
		}
	}()
}

// republish asks for the descriptor to be published again.
func (c *Connector) republish() {
	if c.meta == nil {
		return
	}
	select {
	case c.meta.dirty <- struct{}{}:
	default:
	}
}

func (c *Connector) publish(ctx context.Context) error {
	b, err := json.Marshal(c.descriptor())
	if err != nil {
		return err
	}
	return c.meta.svc.Publish(ctx, c.session, b, metadata.RPCLocation{Host: c.cfg.Hostname, Port: c.rpcPort})
}

// fetchDescriptor returns a peer's descriptor: from the metadata service
// when there is one, else over the peer's RPC port (its memory from the
// handshake budget). The caller calls release once done with it.
func (c *Connector) fetchDescriptor(ctx context.Context, session string) (body []byte, release func(), err error) {
	if c.meta == nil {
		f, err := c.request(ctx, session, frameMetadata, marshal(requestBody{KVConnect: c.mark()}))
		if err != nil {
			return nil, nil, err
		}
		return f.body, f.release, nil
	}
	b, err := c.meta.svc.Resolve(ctx, session)
	if err != nil {
		return nil, nil, fmt.Errorf("connector: peer %s: %w", session, err)
	}
	return b, func() {}, nil
}

// rpcAddress is where session's RPC port is: the session itself when it
// is host:port, else (a Mooncake node named by --local_server_name) its
// RPC location in the metadata service.
func (c *Connector) rpcAddress(ctx context.Context, session string) (string, error) {
	if _, _, err := splitSession(session); err == nil || c.meta == nil {
		return session, err
	}
	loc, err := c.meta.svc.ResolveRPC(ctx, session)
	if err != nil {
		return "", fmt.Errorf("connector: peer %s: %w", session, err)
	}
	return net.JoinHostPort(loc.Host, strconv.Itoa(loc.Port)), nil
}

// validSession checks a segment name Open was given: host:port, or with a
// metadata service any name (Mooncake's --local_server_name).
func (c *Connector) validSession(session string) error {
	if c.meta != nil {
		if session == "" {
			return fmt.Errorf("connector: empty segment name: %w", ErrInvalidArgument)
		}
		return nil
	}
	_, _, err := splitSession(session)
	return err
}

// goneErr reports a peer whose metadata key disappeared, failing fast
// between lookups; nil when the key is there (or there is no service),
// or when it is time to look it up again (the batch then reconnects).
func (c *Connector) goneErr(p *Peer) error {
	if c.meta == nil {
		return nil
	}
	select {
	case <-c.meta.svc.Gone(p.session):
	default:
		return nil
	}
	c.meta.mu.Lock()
	last, looked := c.meta.lookups[p.session]
	now := time.Now()
	if looked && now.Sub(last) < goneRetry {
		c.meta.mu.Unlock()
		return fmt.Errorf("connector: peer %s is gone: its metadata key %s disappeared (the node closed, or died and its lease expired); looking it up again every %v: %w",
			p.session, c.meta.keys.Segment(p.session), goneRetry, ErrPeerUnreachable)
	}
	c.meta.lookups[p.session] = now
	c.meta.mu.Unlock()
	// Reconnect: resolve the key again (and drop the old link).
	l, _, _ := p.link()
	p.markStale(l.at, l.id, fmt.Errorf("its metadata key %s disappeared", c.meta.keys.Segment(p.session)))
	return nil
}

// closeMetadata removes this node's keys (its lease is revoked).
func (c *Connector) closeMetadata(ctx context.Context) error {
	if c.meta == nil {
		return nil
	}
	if err := c.meta.svc.Close(ctx); err != nil {
		return fmt.Errorf("connector: closing the metadata service: %w", err)
	}
	return nil
}
