package transporttest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/kvconnect/kvconnect/plugins"
)

// stats asks n's transport for its served counts; ok is false when it
// does not report them (no plugins.StatsReporter, or a plugin answering
// ErrNotSupported).
func (n *Node) stats(t *testing.T) (plugins.ServedStats, bool) {
	t.Helper()
	sr, ok := n.T.(plugins.StatsReporter)
	if !ok {
		return plugins.ServedStats{}, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := sr.Stats(ctx)
	if errors.Is(err, plugins.ErrNotSupported) {
		return plugins.ServedStats{}, false
	}
	if err != nil {
		t.Fatalf("%s: Stats: %v", n.Name, err)
	}
	return st, true
}

// servedOps sums st's counts of kind and result.
func servedOps(st plugins.ServedStats, kind plugins.OpKind, result string) (ops, bytes uint64) {
	for _, o := range st.Ops {
		if o.Op == kind && o.Result == result {
			ops, bytes = ops+o.Ops, bytes+o.Bytes
		}
	}
	return ops, bytes
}

func refusals(st plugins.ServedStats, reason string) uint64 {
	var n uint64
	for _, r := range st.Refusals {
		if r.Reason == reason {
			n += r.Count
		}
	}
	return n
}

// testServedStats runs for a transport that reports what it served
// (plugins.StatsReporter): the target counts exactly the bytes peers
// wrote and read, by the time each batch completed; a refused op counts
// as refused with its reason; the initiator served nothing; no count
// goes down.
func testServedStats(t *testing.T, h Harness) {
	a, b := pair(t, h)
	before, ok := b.stats(t)
	if !ok {
		t.Skip("the transport does not report served counts (plugins.StatsReporter)")
	}
	const size = 256 << 10
	src := a.Alloc(t, size, 0)
	dst := b.Alloc(t, size, 0)
	Fill(src.Bytes, 21)
	peer := a.Connect(t, b)
	writes := []plugins.Op{
		{Kind: plugins.OpWrite, LocalRegion: src.ID, RemoteRegion: dst.ID, Length: 100000},
		{Kind: plugins.OpWrite, LocalRegion: src.ID, LocalOffset: 100000, RemoteRegion: dst.ID, RemoteOffset: 100000, Length: 1},
		{Kind: plugins.OpWrite, LocalRegion: src.ID, LocalOffset: 100001, RemoteRegion: dst.ID, RemoteOffset: 100001, Length: size - 100001},
	}
	a.MustTransfer(t, peer, writes)
	a.MustTransfer(t, peer, []plugins.Op{{Kind: plugins.OpRead, LocalRegion: src.ID, RemoteRegion: dst.ID, RemoteOffset: 7, Length: 70000}})
	res, _ := a.Transfer(t, peer, []plugins.Op{{Kind: plugins.OpWrite, LocalRegion: src.ID, RemoteRegion: dst.ID, RemoteOffset: size - 8, Length: 16}})
	if !errors.Is(res[0].Err, plugins.ErrOutOfBounds) {
		t.Fatalf("WRITE past the end: %v, want ErrOutOfBounds", res[0].Err)
	}
	after, _ := b.stats(t)

	diff := func(kind plugins.OpKind, result string) (uint64, uint64) {
		o1, b1 := servedOps(after, kind, result)
		o0, b0 := servedOps(before, kind, result)
		return o1 - o0, b1 - b0
	}
	if ops, n := diff(plugins.OpWrite, plugins.ResultCompleted); n != size || ops < uint64(len(writes)) {
		t.Errorf("served completed WRITEs: %d requests, %d bytes; want %d bytes in at least %d requests", ops, n, size, len(writes))
	}
	if ops, n := diff(plugins.OpRead, plugins.ResultCompleted); n != 70000 || ops < 1 {
		t.Errorf("served completed READs: %d requests, %d bytes; want 70000 bytes", ops, n)
	}
	// An initiator may refuse the op itself, from the peer's published
	// regions (then the target never sees it); if the target refused it,
	// it counts it with its reason.
	ops, n := diff(plugins.OpWrite, plugins.ResultRefused)
	oob := refusals(after, plugins.RefusedOutOfBounds) - refusals(before, plugins.RefusedOutOfBounds)
	if ops > 1 || ops == 1 && n != 16 || oob != ops {
		t.Errorf("served refused WRITEs: %d requests, %d bytes, %d out_of_bounds refusals; want 1 of 16 bytes and 1 refusal (or none if the initiator refused it)", ops, n, oob)
	}
	for _, o := range before.Ops {
		if ops, n := servedOps(after, o.Op, o.Result); ops < o.Ops || n < o.Bytes {
			t.Errorf("%s %s went down: %d/%d requests, %d/%d bytes", o.Op, o.Result, o.Ops, ops, o.Bytes, n)
		}
	}
	for _, o := range after.Ops {
		if o.Op != plugins.OpRead && o.Op != plugins.OpWrite {
			t.Errorf("an entry for op kind %d", o.Op)
		}
		known := false
		for _, r := range plugins.ServedResults() {
			known = known || o.Result == r
		}
		if !known {
			t.Errorf("an entry with result %q, want one of %v", o.Result, plugins.ServedResults())
		}
	}
	if st, ok := a.stats(t); ok {
		if _, n := servedOps(st, plugins.OpWrite, plugins.ResultCompleted); n != 0 {
			t.Errorf("the initiator reports %d WRITE bytes served: it served none", n)
		}
	}
}
