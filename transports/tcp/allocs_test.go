package tcp_test

import (
	"context"
	"testing"

	"github.com/kvconnect/kvconnect/plugins"
)

// TestBatchAllocationsDoNotGrowWithOps: a batch's heap allocations (the
// caller's and the connections' goroutines', counted process-wide) do not
// grow by one per op. Each response's header was a local that escaped to
// the heap: 543 allocations for a batch of 512 against 29 for 8 (789
// against 32 with -race). Without the race detector a batch of 512 now
// allocates as often as one of 8; with it, about every other op
// allocates, because the race detector's sync.Pool drops a share of what
// it is given on purpose and the regions' pooled keys are made again. So
// the bound is fewer than 3 allocations per 4 ops more.
func TestBatchAllocationsDoNotGrowWithOps(t *testing.T) {
	a, c := benchNode(t, false), benchNode(t, false)
	const most = 512
	src, dst := a.alloc(t, most*4096), c.alloc(t, most*4096)
	peer, err := a.tr.Connect(context.Background(), plugins.PeerInfo{Name: "allocs", Endpoint: c.endpoint})
	if err != nil {
		t.Fatal(err)
	}
	allocs := func(n int) float64 {
		ops := make([]plugins.Op, n)
		for i := range ops {
			ops[i] = plugins.Op{Kind: plugins.OpRead, LocalRegion: src, LocalOffset: uint64(i * 4096), RemoteRegion: dst, RemoteOffset: uint64(i * 4096), Length: 4096}
		}
		res := make([]plugins.OpResult, n)
		transfer := func() {
			if err := a.tr.Transfer(context.Background(), peer, ops, res); err != nil {
				t.Fatal(err)
			}
		}
		transfer() // connections up, buffers grown
		return testing.AllocsPerRun(20, transfer)
	}
	few, many := allocs(8), allocs(most)
	if bound := 0.75 * (most - 8); many-few >= bound {
		t.Fatalf("a batch of %d ops allocates %.0f times, one of 8 %.0f: allocations grow with the ops (want fewer than %.0f more)", most, many, few, bound)
	}
	t.Logf("allocations per batch: %.0f for 8 ops, %.0f for %d", few, many, most)
}
