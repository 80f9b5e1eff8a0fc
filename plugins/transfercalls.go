package plugins

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/kvconnect/kvconnect/errdefs"
)

// transferCalls are the batches Transfer calls run that the host may
// end (CancelTransfer): by the id it gave each. Its zero value is ready;
// its methods are safe for concurrent use.
type transferCalls struct {
	mu      sync.Mutex
	running map[uint64]context.CancelFunc
}

// start derives a batch's context from its call's: ended after timeout
// nanoseconds (the caller's own deadline; 0: none) or by cancel(id).
// end releases it, and must be called once the batch returned. An id
// already running is a protocol error.
func (t *transferCalls) start(ctx context.Context, id uint64, timeout int64) (context.Context, context.CancelFunc, error) {
	var cancel context.CancelFunc
	if timeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, time.Duration(timeout))
	} else {
		ctx, cancel = context.WithCancel(ctx)
	}
	if id == 0 {
		return ctx, cancel, nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, dup := t.running[id]; dup {
		cancel()
		return nil, nil, fmt.Errorf("transfer: batch id %d is already running: %w", id, errdefs.ErrProtocol)
	}
	if t.running == nil {
		t.running = map[uint64]context.CancelFunc{}
	}
	t.running[id] = cancel
	return ctx, func() {
		t.mu.Lock()
		delete(t.running, id)
		t.mu.Unlock()
		cancel()
	}, nil
}

// cancel ends batch id's context, and reports whether it runs.
func (t *transferCalls) cancel(id uint64) bool {
	t.mu.Lock()
	cancel := t.running[id]
	t.mu.Unlock()
	if cancel == nil {
		return false
	}
	cancel()
	return true
}
