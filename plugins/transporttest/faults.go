package transporttest

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/kvconnect/kvconnect/plugins"
)

// bigBatch returns n WRITEs of size bytes from src, op i to dst at offset
// (i*size) mod len(dst.Bytes): a batch long enough to still be in flight
// well after it starts.
func bigBatch(src, dst *Mem, n, size int) []plugins.Op {
	ops := make([]plugins.Op, n)
	for i := range ops {
		ops[i] = plugins.Op{Kind: plugins.OpWrite, LocalRegion: src.ID, RemoteRegion: dst.ID, RemoteOffset: uint64((i * size) % len(dst.Bytes)), Length: uint64(size)}
	}
	return ops
}

// waitInFlight returns once the first op of a bigBatch from a src filled
// with pattern has landed in dst (so the batch is in flight), or once done
// is closed (the batch already ended). It reads dst through its shared-
// memory file, never through the mapping the transport writes, so the
// race detector sees no access of the test's. It fails the test if
// neither happens within limit.
func waitInFlight(t *testing.T, dst *Mem, pattern []byte, done <-chan struct{}, limit time.Duration) (inFlight bool) {
	t.Helper()
	probe := make([]byte, min(len(pattern), 4096))
	deadline := time.Now().Add(limit)
	for {
		if _, err := dst.seg.File().ReadAt(probe, int64(dst.guard)); err != nil {
			t.Fatalf("reading the target region through its file: %v", err)
		}
		if bytes.Equal(probe, pattern[:len(probe)]) {
			return true
		}
		select {
		case <-done:
			return false
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the batch neither started nor ended within %v", limit)
		}
		time.Sleep(time.Millisecond) // polling an observed condition, not ordering events
	}
}

func failedOps(res []plugins.OpResult) (failed int, bad error) {
	for _, r := range res {
		if r.Err == nil {
			continue
		}
		failed++
		if !errors.Is(r.Err, plugins.ErrPeerUnreachable) && !errors.Is(r.Err, plugins.ErrClosed) &&
			!errors.Is(r.Err, plugins.ErrTimeout) && !errors.Is(r.Err, plugins.ErrCanceled) && bad == nil {
			bad = r.Err
		}
	}
	return failed, bad
}

// inFlightBatch starts a long WRITE batch from a to b's dst and returns
// once it is in flight: its results, a channel closed when it ends, and
// the ops.
func inFlightBatch(t *testing.T, h Harness, a *Node, peer plugins.PeerID, src, dst *Mem, nops, size int) ([]plugins.OpResult, chan struct{}, []plugins.Op) {
	t.Helper()
	Fill(src.Bytes, 21)
	ops := bigBatch(src, dst, nops, size)
	done := make(chan struct{})
	res := make([]plugins.OpResult, len(ops))
	go func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
		defer cancel()
		a.T.Transfer(ctx, peer, ops, res)
	}()
	if !waitInFlight(t, dst, src.Bytes, done, 30*time.Second) {
		t.Fatalf("a batch of %d x %d bytes ended before the test saw it in flight", nops, size)
	}
	return res, done, ops
}

func testPeerClosedMidBatch(t *testing.T, h Harness) {
	a, b := pair(t, h)
	const size = 1 << 20
	src := a.Alloc(t, size, 0)
	dst := b.Alloc(t, 16*size, 0)
	peer := a.Connect(t, b)
	res, done, ops := inFlightBatch(t, h, a, peer, src, dst, 16384, size) // 16 GiB: far longer than the close below
	closed := time.Now()
	if err := b.T.Close(context.Background()); err != nil {
		t.Fatalf("closing the peer: %v", err)
	}
	select {
	case <-done:
	case <-time.After(h.FailWithin):
		t.Fatalf("batch still running %v after its peer closed", h.FailWithin)
	}
	failed, bad := failedOps(res)
	t.Logf("batch ended %v after the peer closed; %d of %d ops failed", time.Since(closed), failed, len(ops))
	if failed == 0 {
		t.Fatal("no op failed although the peer closed mid-batch")
	}
	if bad != nil {
		t.Fatalf("op failed with %v, want ErrPeerUnreachable, ErrClosed or ErrTimeout", bad)
	}
}

func testCloseInFlight(t *testing.T, h Harness) {
	a, b := pair(t, h)
	const size = 1 << 20
	src := a.Alloc(t, size, 0)
	dst := b.Alloc(t, 16*size, 0)
	peer := a.Connect(t, b)
	res, done, ops := inFlightBatch(t, h, a, peer, src, dst, 16384, size)
	if err := a.T.Close(context.Background()); err != nil {
		t.Fatalf("Close with ops in flight: %v", err)
	}
	select {
	case <-done:
	case <-time.After(h.FailWithin):
		t.Fatalf("batch still running %v after Close", h.FailWithin)
	}
	failed, bad := failedOps(res)
	if failed == 0 {
		t.Fatal("no op failed although the transport closed mid-batch")
	}
	if bad != nil {
		t.Fatalf("op failed with %v, want ErrClosed", bad)
	}
	if err := a.T.Close(context.Background()); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	r := make([]plugins.OpResult, 1)
	if err := a.T.Transfer(context.Background(), peer, ops[:1], r); !errors.Is(err, plugins.ErrClosed) {
		t.Fatalf("Transfer after Close: got %v, want ErrClosed", err)
	}
}

// testDeregisterInFlight: DeregisterRegion of the source of WRITEs in
// flight returns only when the transport no longer reads it. The test
// poisons the source as soon as DeregisterRegion returns: no byte of the
// poison may reach the target.
func testDeregisterInFlight(t *testing.T, h Harness) {
	a, b := pair(t, h)
	const size = 1 << 20
	src := a.Alloc(t, size, 0)
	dst := b.Alloc(t, 16*size, 0)
	peer := a.Connect(t, b)
	res, done, ops := inFlightBatch(t, h, a, peer, src, dst, 1024, size)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	err := a.T.DeregisterRegion(ctx, src.ID)
	cancel()
	if err != nil {
		t.Fatalf("DeregisterRegion with ops in flight: %v", err)
	}
	for i := range src.Bytes {
		src.Bytes[i] = 0xA5
	}
	select {
	case <-done:
	case <-time.After(h.FailWithin):
		t.Fatalf("batch still running %v after its source was deregistered", h.FailWithin)
	}
	completed := 0
	for _, r := range res {
		if r.Err == nil {
			completed++
		}
	}
	got := make([]byte, len(dst.Bytes))
	if _, err := dst.seg.File().ReadAt(got, int64(dst.guard)); err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(got, bytes.Repeat([]byte{0xA5}, 64)) {
		t.Fatalf("the source was read after DeregisterRegion returned: poison reached the target (%d of %d ops completed)", completed, len(ops))
	}
	t.Logf("%d of %d ops completed; the rest failed after the source was deregistered", completed, len(ops))
	// The memory is the test's again: free it without the transport.
	a.mu.Lock()
	delete(a.regions, src.ID)
	a.mu.Unlock()
	src.seg.Close()
}
