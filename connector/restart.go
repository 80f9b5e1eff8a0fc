package connector

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/kvconnect/kvconnect/plugins"
)

// restartBackoff is the wait before each attempt to restart a crashed
// transport plugin; after the last one the transport stays down.
var restartBackoff = []time.Duration{50 * time.Millisecond, 500 * time.Millisecond, 2 * time.Second}

// restart brings a crashed transport plugin back: it launches and
// initialises the transport again, registers every region with it, and
// replaces the crashed entry. Peers reached through the crashed transport
// reconnect on their next batch (Peer.ensure), and peers that reached this
// node through it find its new endpoint in its descriptor.
func (c *Connector) restart(old *activeTransport) {
	defer c.wg.Done()
	for i, wait := range restartBackoff {
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-c.closing:
			t.Stop()
			return
		}
		err := c.restartOnce(old)
		if err == nil {
			return
		}
		c.log.Warn("restarting the transport plugin failed", zap.String("transport", old.name), zap.Int("attempt", i+1), zap.Error(err))
	}
	c.log.Error("giving up restarting the transport plugin; transfers on it fail until the node is restarted",
		zap.String("transport", old.name), zap.Int("attempts", len(restartBackoff)))
}

func (c *Connector) restartOnce(old *activeTransport) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	go func() {
		select {
		case <-c.closing:
			cancel()
		case <-ctx.Done():
		}
	}()
	at, err := c.startTransport(ctx, old.name)
	if err != nil {
		return err
	}
	if err := c.lockRegions(ctx); err != nil {
		closeBounded(context.Background(), at.tr)
		return err
	}
	defer c.unlockRegions()
	c.mu.Lock()
	regions := make([]*Region, 0, len(c.regions))
	for _, r := range c.regions {
		regions = append(regions, r)
	}
	c.mu.Unlock()
	trs := make([]plugins.Region, len(regions))
	for i, r := range regions {
		trs[i] = r.transportRegion()
	}
	keys := make(map[RegionID][]byte, len(regions))
	if len(trs) > 0 {
		got, err := registerWith(ctx, at.tr, trs)
		if err != nil {
			closeBounded(context.Background(), at.tr)
			return fmt.Errorf("registering %d regions with the restarted transport: %w", len(trs), err)
		}
		for i, r := range regions {
			keys[r.id] = got[i]
		}
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		closeBounded(context.Background(), at.tr)
		return nil
	}
	replaced := false
	for i, t := range c.transports {
		if t == old {
			c.transports[i], replaced = at, true
		}
	}
	at.restarts = old.restarts + 1
	for _, r := range regions {
		r.keys[at.name] = keys[r.id]
	}
	c.mu.Unlock()
	if !replaced {
		closeBounded(context.Background(), at.tr)
		return nil
	}
	// Release what the crashed plugin left on this side (its client, the
	// fd channel, its socket directory).
	closeBounded(context.Background(), old.tr)
	if at.plugin != nil {
		c.wg.Add(1)
		go c.watchPlugin(at)
	}
	c.log.Info("transport plugin restarted", zap.String("transport", at.name), zap.String("endpoint", at.res.Summary),
		zap.Int("restarts", at.restarts), zap.Int("regions", len(regions)))
	c.republish() // its endpoint changed
	return nil
}
