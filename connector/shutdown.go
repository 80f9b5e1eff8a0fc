package connector

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/kvconnect/kvconnect/plugins"
)

// DefaultShutdownTimeout bounds Close: how long it waits for transports
// to close and batches in flight to end.
const DefaultShutdownTimeout = 30 * time.Second

// Close is Shutdown bounded by DefaultShutdownTimeout.
func (c *Connector) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), DefaultShutdownTimeout)
	defer cancel()
	return c.Shutdown(ctx)
}

// Shutdown stops the node: it stops answering handshakes (a request
// already read, such as a notification the application has received, is
// still answered, for at most a second), fails work in
// flight with ErrClosed, disconnects peers, closes the transports (ending
// their plugin processes), releases every region and waits for its
// goroutines, all bounded by ctx (each transport's close also by 10 s).
// When ctx ends first it returns the context's error (ErrTimeout or
// ErrCanceled) and leaves what is still running to finish on its own;
// regions a transport may still touch stay mapped. It is idempotent: a
// later call waits (bounded by its own ctx) for the first to finish and
// returns nil.
func (c *Connector) Shutdown(ctx context.Context) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		select {
		case <-c.shutdownDone:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("connector: waiting for shutdown: %w", contextError(ctx.Err()))
		}
	}
	c.closed = true
	close(c.closing)
	peers := c.peers
	c.peers = map[string]*Peer{}
	c.mu.Unlock()
	defer close(c.shutdownDone)

	if c.rpc != nil {
		c.rpc.close(ctx)
	}
	// Remove this node's keys first: peers resolving it learn it is gone.
	metaErr := c.closeMetadata(ctx)
	metricsErr := c.metricsStop(ctx)
	// No handshake handler runs any more, so nothing sends on notify.
	close(c.notify)
	for _, p := range peers {
		p.markClosed()
	}
	err := c.closeTransports(ctx)
	c.mu.Lock()
	regions := c.regions
	c.regions = map[RegionID]*Region{}
	for id, r := range c.draining {
		regions[id] = r
	}
	c.draining = map[RegionID]*Region{}
	c.mu.Unlock()
	// Plugin processes are gone once closed, so nothing of theirs touches
	// region memory. An in-process transport that failed to close may still
	// run ops on it: then the memory stays mapped (a leak, not corruption).
	inProcessFailed := false
	if err != nil {
		for _, at := range c.active() {
			inProcessFailed = inProcessFailed || at.plugin == nil
		}
	}
	if !inProcessFailed {
		for _, r := range regions {
			r.release()
		}
	}
	waited := make(chan struct{})
	go func() { c.wg.Wait(); close(waited) }()
	select {
	case <-waited:
		// A Free under way during the sweep above may have left its
		// region draining since.
		c.mu.Lock()
		late := c.draining
		c.draining = map[RegionID]*Region{}
		c.mu.Unlock()
		if !inProcessFailed {
			for _, r := range late {
				r.release()
			}
		}
	case <-ctx.Done():
		err = errors.Join(err, fmt.Errorf("connector: shutdown left batches or plugin restarts running: %w", contextError(ctx.Err())))
	}
	c.log.Info("kvconnect node closed", zap.String("session", c.session))
	return errors.Join(metaErr, err, metricsErr)
}

func (c *Connector) closeTransports(ctx context.Context) error {
	var errs []error
	for _, at := range c.active() {
		if err := closeBounded(ctx, at.tr); err != nil && !errors.Is(err, ErrTransportCrashed) {
			errs = append(errs, fmt.Errorf("connector: closing transport %s: %w", at.name, err))
		}
	}
	return errors.Join(errs...)
}

// closeTimeout bounds closing a transport; a plugin that does not answer
// in time is killed. A variable for tests.
var closeTimeout = 10 * time.Second

// closeBounded closes tr within closeTimeout or ctx's earlier deadline.
// ctx's cancellation alone does not cut the close short: a canceled
// caller (Ctrl-C) still gets its transports closed in order, within
// closeTimeout.
func closeBounded(ctx context.Context, tr plugins.Transport) error {
	d := closeTimeout
	if dl, ok := ctx.Deadline(); ok {
		d = min(d, time.Until(dl))
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d)
	defer cancel()
	return tr.Close(ctx)
}
