//go:build linux && cgo

package efa

import (
	"context"
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/kvconnect/kvconnect/plugins"
)

// close stops the progress thread, which fails every op still in flight,
// waits (bounded) for posted operations to come back, and closes
// everything.
func (f *fabric) close(ctx context.Context) error {
	local.mu.Lock()
	_, open := local.m[f]
	delete(local.m, f)
	var others []*fabric
	for g := range local.m {
		others = append(others, g)
	}
	local.mu.Unlock()
	if open {
		for _, g := range others {
			var drained chan struct{}
			g.do(func() error { drained = g.localPeerClosed(string(f.self), f.info.Provider); return nil })
			if drained != nil {
				select {
				case <-drained:
				case <-time.After(drainTimeout):
					f.log.Warn("efa: a transport of this process still has operations posted to this one as it closes")
				}
			}
		}
	}
	deadline := time.Now().Add(drainTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	f.enqueue(func(dead bool) {
		f.stopping = true
		f.drainUntil = deadline
	})
	<-f.exited
	return f.closeErr
}

// livePosted counts posted contexts whose peer has not closed.
func (f *fabric) livePosted() int {
	n := 0
	for _, ref := range f.slots {
		switch {
		case ref.b != nil && !ref.b.conn.dead():
			n++
		case ref.pr != nil && !ref.pr.key.conn.dead():
			n++
		}
	}
	return n
}

// teardown runs on the progress thread when it stops.
func (f *fabric) teardown(slots []uint32) {
	closedErr := fmt.Errorf("efa: transport closed: %w", plugins.ErrClosed)
	for b := range f.active {
		b.failUnreported(closedErr)
	}
	f.active = map[*batch]struct{}{}
	f.pend = nil
	// Let posted operations come back before the endpoint goes: a peer
	// may still be reading or writing our memory for them.
	for f.livePosted() > 0 && time.Now().Before(f.drainUntil) {
		n, e := f.c.poll(slots)
		if f.handle(n, e, slots) == 0 {
			f.c.block(busySleep)
		}
	}
	var errs []string
	if rc := f.c.closeEP(); rc != 0 {
		errs = append(errs, fmt.Sprintf("fi_close(ep): %s", fiStrerror(rc)))
	}
	if f.posted > 0 {
		f.log.Warn("efa: closed the endpoint with operations still posted", zap.Int("posted", f.posted))
	}
	for i, ref := range f.slots {
		f.slots[i] = slotRef{}
		if ref.b != nil {
			ref.b.finishChunk(&ref.b.chunks[ref.c], closedErr)
		}
	}
	for _, p := range f.probes {
		for _, w := range p.chunks {
			w.b.finishChunk(&w.b.chunks[w.c], closedErr)
		}
	}
	f.probes = map[probeKey]*probe{}
	f.probeQueue = nil
	f.posted = 0
	f.mrMu.Lock()
	for id, h := range f.mrs {
		if rc := f.c.mrClose(h); rc != 0 {
			errs = append(errs, fmt.Sprintf("closing the registration of region %d: %s", id, fiStrerror(rc)))
		}
	}
	f.mrs = map[uint64]*mrHandle{}
	f.mrMu.Unlock()
	f.closeTables()
	f.mu.Lock()
	f.closed = true // no wake after this: the eventfd goes with c
	f.mu.Unlock()
	f.c.free()
	if len(errs) > 0 {
		f.closeErr = fmt.Errorf("efa: close: %s: %w", strings.Join(errs, "; "), plugins.ErrInternal)
	}
	f.runQueue(true)
}
