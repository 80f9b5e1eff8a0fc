package tcp_test

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"unsafe"

	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/plugins/transporttest"
	"github.com/kvconnect/kvconnect/transports/tcp"
)

// TestRegisterRegionWhileInitRuns: a registration that passes the
// transport's guard the moment Init marks it up reads the options Init
// set (the race detector fails this test when Init sets them after).
func TestRegisterRegionWhileInitRuns(t *testing.T) {
	ctx := context.Background()
	tr := tcp.New()
	defer tr.Close(ctx)
	mem := make([]byte, 4096)
	initDone := make(chan error, 1)
	go func() {
		_, err := tr.Init(ctx, plugins.InitRequest{Hostname: "127.0.0.1"})
		initDone <- err
	}()
	for {
		_, err := tr.RegisterRegion(ctx, plugins.Region{ID: 1, Addr: uint64(uintptr(unsafe.Pointer(&mem[0]))), Mem: mem})
		if err == nil {
			break
		}
		if !errors.Is(err, plugins.ErrNotInitialized) {
			t.Fatalf("RegisterRegion while Init runs: %v, want nil or ErrNotInitialized", err)
		}
		runtime.Gosched()
	}
	if err := <-initDone; err != nil {
		t.Fatal(err)
	}
}

// TestMooncakeTransferMeetingClose: ops of a batch to a Mooncake peer
// that Close overtakes fail with ErrClosed (or succeed), never with the
// unknown region Close's emptying of the region table would otherwise
// give them. Close is started at varying points of a large batch; the
// window is small, so it is tried several times.
func TestMooncakeTransferMeetingClose(t *testing.T) {
	for round := 0; round < 12; round++ {
		h := inproc(``)
		h.PeerEndpoint = mooncakeEndpoint(t, 2)
		a := transporttest.NewNode(t, h, "a")
		b := transporttest.NewNode(t, h, "b")
		const n = 16384
		src := a.Alloc(t, n*64, 0)
		dst := b.Alloc(t, n*64, 0)
		peer := a.Connect(t, b)
		ops := make([]plugins.Op, n)
		for i := range ops {
			ops[i] = plugins.Op{Kind: plugins.OpWrite, LocalRegion: src.ID, LocalOffset: uint64(i * 64), RemoteRegion: dst.ID, RemoteOffset: uint64(i * 64), Length: 64}
		}
		res := make([]plugins.OpResult, n)
		started, done := make(chan struct{}), make(chan error, 1)
		go func() {
			close(started)
			done <- a.T.Transfer(context.Background(), peer, ops, res)
		}()
		<-started
		for i := 0; i < round*40; i++ {
			runtime.Gosched()
		}
		if err := a.T.Close(context.Background()); err != nil {
			t.Fatalf("round %d: Close: %v", round, err)
		}
		<-done
		for i, r := range res {
			if r.Err != nil && !errors.Is(r.Err, plugins.ErrClosed) {
				t.Fatalf("round %d: op %d: %v, want nil or ErrClosed", round, i, r.Err)
			}
		}
	}
}
