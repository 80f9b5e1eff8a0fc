//go:build linux && cgo

package ucx_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"runtime"
	"testing"

	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/plugins/transporttest"
	"github.com/kvconnect/kvconnect/transports/ucx"
)

// TestCanceledWriteNeverLands: what docs/RELIABILITY.md guarantees for
// ucx when the caller gives up on a batch (its context ends): the WRITEs
// reported canceled were never handed to UCX, so they never land; the
// ones in flight are waited for and reported as they ended (done means
// in the peer's memory). The batch is canceled once its first WRITE has
// landed; the memory is checked when Transfer returns and again after a
// later batch to the peer, whose endpoint flush follows anything the
// first one had issued.
func TestCanceledWriteNeverLands(t *testing.T) {
	for _, tls := range []string{"tcp", "sm"} {
		t.Run(tls, func(t *testing.T) {
			var o map[string]any
			json.Unmarshal(options(t, tls), &o)
			o["max_inflight"] = 1 // one WRITE in flight at a time: most are still queued when the batch is canceled
			opts, _ := json.Marshal(o)
			h := transporttest.Harness{New: func(t *testing.T) plugins.Transport { return ucx.New() }, Options: opts}
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
			check := func(when string) (ok, canceled int) {
				for i, r := range results {
					switch {
					case r.Err == nil:
						ok++
						if !landed(i) {
							t.Fatalf("%s: WRITE %d reported done is not in the peer's memory", when, i)
						}
					case errors.Is(r.Err, plugins.ErrCanceled):
						canceled++
						if landed(i) {
							t.Fatalf("%s: WRITE %d reported canceled is in the peer's memory", when, i)
						}
					default:
						t.Fatalf("WRITE %d: %v", i, r.Err)
					}
				}
				return ok, canceled
			}
			ok, canceled := check("when Transfer returned")
			t.Logf("%d WRITEs done, %d canceled", ok, canceled)
			if canceled == 0 {
				t.Fatal("every WRITE completed before the cancel: nothing was given up on")
			}
			// A later batch's flush completes after everything the first
			// one issued: nothing of it can land after this.
			a.MustTransfer(t, peer, []plugins.Op{{Kind: plugins.OpWrite, LocalRegion: src.ID, RemoteRegion: dst.ID, RemoteOffset: 0, Length: 4096}})
			check("after a later batch")
		})
	}
}
