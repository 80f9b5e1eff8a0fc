//go:build linux && cgo

package efa_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"runtime"
	"testing"

	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/plugins/transporttest"
	"github.com/kvconnect/kvconnect/transports/efa"
)

// TestCanceledWriteNeverPosted: what docs/RELIABILITY.md guarantees for
// efa when the caller gives up on a batch (its context ends): its ops are
// reported at once, and the WRITEs not yet handed to libfabric never are,
// so they never land. A WRITE already posted cannot be taken back
// (libfabric cannot cancel an RMA): it may still land after it was
// reported canceled. With max_inflight 1 that is at most one, the first
// canceled. The batch is canceled once its first WRITE has landed; the
// memory is checked again after a later batch, which can only post once
// whatever the first one had posted came back.
func TestCanceledWriteNeverPosted(t *testing.T) {
	for _, p := range softProviders {
		t.Run(p.name, func(t *testing.T) {
			var o map[string]any
			json.Unmarshal([]byte(p.opts), &o)
			o["max_inflight"] = 1
			opts, _ := json.Marshal(o)
			h := transporttest.Harness{New: func(t *testing.T) plugins.Transport { return efa.New() }, Options: opts}
			a, b := transporttest.NewNode(t, h, "a"), transporttest.NewNode(t, h, "b")
			const size, n = 256 << 10, 256
			src := a.Alloc(t, size, 0)
			dst := b.Alloc(t, n*size, 0)
			transporttest.Fill(src.Bytes, 7)
			peer := a.Connect(t, b)
			ops := make([]plugins.Op, n)
			for i := range ops {
				ops[i] = plugins.Op{Kind: plugins.OpWrite, LocalRegion: src.ID, RemoteRegion: dst.ID, RemoteOffset: uint64(i) * size, Length: size}
			}
			landed := func(i int) bool { return bytes.Equal(dst.Bytes[i*size:(i+1)*size], src.Bytes) }
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			results := make([]plugins.OpResult, n)
			done := make(chan error, 1)
			go func() { done <- a.T.Transfer(ctx, peer, ops, results) }()
			for !landed(0) { // the first WRITE is in the peer's memory: cancel mid-batch
				runtime.Gosched()
			}
			cancel()
			<-done
			firstCanceled := -1
			for i, r := range results {
				switch {
				case r.Err == nil:
					if !landed(i) {
						t.Fatalf("WRITE %d reported done is not in the peer's memory", i)
					}
				case errors.Is(r.Err, plugins.ErrCanceled):
					if firstCanceled < 0 {
						firstCanceled = i
					}
				default:
					t.Fatalf("WRITE %d: %v", i, r.Err)
				}
			}
			if firstCanceled < 0 {
				t.Fatal("every WRITE completed before the cancel: nothing was given up on")
			}
			// With max_inflight 1 this batch posts only once the context
			// the first one held came back.
			a.MustTransfer(t, peer, []plugins.Op{{Kind: plugins.OpWrite, LocalRegion: src.ID, RemoteRegion: dst.ID, RemoteOffset: 0, Length: 4096}})
			late := 0
			for i := firstCanceled; i < n; i++ {
				if !landed(i) {
					continue
				}
				if i != firstCanceled {
					t.Fatalf("WRITE %d, reported canceled and never posted (max_inflight 1: only WRITE %d could be), landed", i, firstCanceled)
				}
				late++
			}
			t.Logf("%d WRITEs done, %d canceled; %d of those landed after (the one posted when the batch was canceled)", firstCanceled, n-firstCanceled, late)
		})
	}
}
