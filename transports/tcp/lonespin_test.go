package tcp_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/plugins/transporttest"
	"github.com/kvconnect/kvconnect/transports/tcp"
	"github.com/kvconnect/kvconnect/transports/tcp/internal/wire"
)

// TestLoneOpSpinEndsWithItsOp: a lone op spinning for a response that
// does not come (the knob fixes the spin at an hour) still ends at
// op_timeout, and when its caller gives up.
func TestLoneOpSpinEndsWithItsOp(t *testing.T) {
	t.Setenv(tcp.EnvLoneSpin, "1h")
	got := make(chan struct{}, 1) // the first request reached the target
	addr, _ := scriptedTarget(t, func(_, _ int, _ net.Conn, _ wire.Header) {
		select { // never answers
		case got <- struct{}{}:
		default:
		}
	})
	a := transporttest.NewNode(t, inproc(`{"connections":1,"op_timeout":"200ms"}`), "a")
	src := a.Alloc(t, 4096, 0)
	peer, err := a.T.Connect(context.Background(), plugins.PeerInfo{Name: "mute", Endpoint: []byte(addr)})
	if err != nil {
		t.Fatal(err)
	}
	op := []plugins.Op{{Kind: plugins.OpWrite, LocalRegion: src.ID, RemoteRegion: 1, Length: 4096}}
	for _, tc := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		want error
	}{
		{"canceled", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			go func() { <-got; cancel() }()
			return ctx, cancel
		}, plugins.ErrCanceled},
		{"op_timeout", func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) }, plugins.ErrTimeout},
	} {
		ctx, cancel := tc.ctx()
		res := make([]plugins.OpResult, 1)
		done := make(chan error, 1)
		go func() { done <- a.T.Transfer(ctx, peer, op, res) }()
		select {
		case <-done:
			if !errors.Is(res[0].Err, tc.want) {
				t.Errorf("%s: op %v, want %v", tc.name, res[0].Err, tc.want)
			}
		case <-time.After(time.Minute):
			t.Fatalf("%s: a lone op spinning for its response outlived its op by a minute", tc.name)
		}
		cancel()
	}
}
