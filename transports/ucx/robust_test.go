//go:build linux && cgo

package ucx_test

import (
	"context"
	"encoding/json"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/plugins/host"
	"github.com/kvconnect/kvconnect/plugins/transporttest"
	"github.com/kvconnect/kvconnect/transports/ucx"
)

// A target plugin killed mid-batch: the initiator's ops fail quickly with
// ErrPeerUnreachable (tcp lanes: UCX's peer error handling; shared memory,
// which has none in UCX 1.13: the peer's pid), later ops fail at once,
// and closing the initiator neither hangs nor aborts the process (UCX
// asserts when a worker with stuck requests is destroyed).
func TestPeerKilledMidBatch(t *testing.T) {
	bin := pluginBinary(t)
	for _, tls := range []string{"tcp", "sm", "sm,tcp"} {
		t.Run(tls, func(t *testing.T) {
			// op_timeout far above the bounds checked below (half of it, so a
			// loaded machine cannot reach them): the failure must come from
			// detecting the death, not from the timeout.
			o, _ := json.Marshal(map[string]any{"tls": tls, "op_timeout": "60s"})
			a := transporttest.NewNode(t, transporttest.Harness{New: func(t *testing.T) plugins.Transport { return ucx.New() }, Options: o}, "a")
			b := transporttest.NewNode(t, transporttest.Harness{New: func(t *testing.T) plugins.Transport { return launch(t, bin) }, Options: o}, "b")
			const size = 1 << 20
			src := a.Alloc(t, size, 0)
			dst := b.Alloc(t, 16*size, 0)
			peer := a.Connect(t, b)
			ops := make([]plugins.Op, 4096)
			for i := range ops {
				ops[i] = plugins.Op{Kind: plugins.OpWrite, LocalRegion: src.ID, RemoteRegion: dst.ID, RemoteOffset: uint64(i%16) * size, Length: size}
			}
			done := make(chan []plugins.OpResult, 1)
			go func() { r, _ := a.Transfer(t, peer, ops); done <- r }()
			time.Sleep(30 * time.Millisecond)
			killed := time.Now()
			if err := syscall.Kill(b.T.(*host.Plugin).Pid(), syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			var res []plugins.OpResult
			select {
			case res = <-done:
			case <-time.After(45 * time.Second):
				t.Fatal("batch still running 45s after its target was killed")
			}
			took := time.Since(killed)
			failed := 0
			for i, r := range res {
				if r.Err == nil {
					continue
				}
				failed++
				if !errors.Is(r.Err, plugins.ErrPeerUnreachable) {
					t.Fatalf("op %d: %v, want ErrPeerUnreachable", i, r.Err)
				}
			}
			t.Logf("batch ended %v after the kill; %d of %d ops failed", took, failed, len(ops))
			if failed == 0 || took > 30*time.Second {
				t.Fatalf("%d ops failed, %v after the kill", failed, took)
			}
			start := time.Now()
			res2, _ := a.Transfer(t, peer, ops[:1])
			if !errors.Is(res2[0].Err, plugins.ErrPeerUnreachable) || time.Since(start) > 30*time.Second {
				t.Fatalf("op to the dead peer: %v after %v, want ErrPeerUnreachable at once", res2[0].Err, time.Since(start))
			}
			start = time.Now()
			if err := a.T.Close(context.Background()); err != nil {
				t.Fatalf("Close: %v", err)
			}
			t.Logf("Close took %v", time.Since(start))
		})
	}
}
