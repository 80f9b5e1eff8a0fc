package ucxpath

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/zap"

	ucxlib "github.com/kvconnect/kvconnect/internal/ucx"
	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/plugins/regions"
)

// TestTimedOutOpKeepsItsRegionUntilUCXIsDone: an op failed by op_timeout
// on a connection without peer error handling (shared memory, or
// error_mode none) is still a UCX request: a stalled peer that resumes
// completes the GET into the local region. Its batch ends at once, but the
// region stays held until UCX reports the request done, so a
// DeregisterRegion waits (its memory stays mapped) instead of returning
// while UCX may still write there. This drives the progress loop's own
// handlers (no UCX worker is needed: nothing is posted).
func TestTimedOutOpKeepsItsRegionUntilUCXIsDone(t *testing.T) {
	var tbl regions.Table
	mem := make([]byte, 4096)
	if err := tbl.Add(1, 0x10000, mem); err != nil {
		t.Fatal(err)
	}
	e, _, err := tbl.Resolve(1, 0, 4096) // what Transfer acquires per op
	if err != nil {
		t.Fatal(err)
	}
	l := &loop{name: "ucx", log: zap.NewNop(), slots: make([]slot, 2), free: []uint32{1},
		opSlots: 1, batches: map[*batch]struct{}{}, busy: map[*peer]struct{}{}}
	p := &peer{name: "b", conn: &conn{}, inflight: 1}
	l.busy[p] = struct{}{}
	b := &batch{p: p, ops: []plugins.Op{{Kind: plugins.OpRead, Length: 4096}}, res: make([]plugins.OpResult, 1),
		local: []*regions.Entry{e}, next: 1, inflight: 1, done: make(chan struct{})}
	l.batches[b] = struct{}{}
	l.slots[0] = slot{kind: slotOp, b: b, i: 0, p: p}

	l.failPeer(p, plugins.ErrTimeout) // op_timeout passed without progress
	select {
	case <-b.done:
	default:
		t.Fatal("the batch did not end when its peer was failed")
	}
	if !errors.Is(b.res[0].Err, plugins.ErrTimeout) {
		t.Fatalf("op result %v, want ErrTimeout", b.res[0].Err)
	}
	// Still held: Remove waits for it, until its (short) bound.
	gone, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := tbl.Remove(gone, 1); err == nil {
		t.Fatal("the region was released while UCX still holds the op's request: a DeregisterRegion would unmap memory UCX may write")
	}
	l.opDone(0, ucxlib.OK) // the peer resumed: UCX completes the request
	// Drained now: Remove returns at once (the bound only keeps a broken
	// release from hanging the test).
	ctx, cancel2 := context.WithTimeout(context.Background(), time.Minute)
	defer cancel2()
	if err := tbl.Remove(ctx, 1); err != nil {
		t.Fatalf("after UCX completed the request the region is still held: %v", err)
	}
}
