package connector_test

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/kvconnect/kvconnect/connector"
	"github.com/kvconnect/kvconnect/internal/testbin"
)

// TestBatchBehindAReconnectHonoursItsCtx: while one batch reconnects a
// peer whose link broke (here the peer is stopped, so the handshake waits
// for connect_timeout, a minute), another batch to that peer waits for
// the reconnect only as long as its own ctx allows.
func TestBatchBehindAReconnectHonoursItsCtx(t *testing.T) {
	n := serve(t, nil)
	cfg := connector.Config{Protocol: "tcp", PluginDir: pluginDir(t), ConnectTimeout: time.Minute}
	a, err := connector.New(context.Background(), cfg, connector.WithLogger(zaptest.NewLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx := context.Background()
	peer, err := a.Open(ctx, n.Session)
	if err != nil {
		t.Fatal(err)
	}
	const size = 4096
	src := alloc(t, a, size)
	dst := peer.Regions()[0].Addr
	testbin.Stop(t, n.PGID, true)
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			syscall.Kill(-n.PGID, syscall.SIGCONT)
		}
	}
	defer resume()
	connector.MarkPeerStale(peer)

	first := make(chan error, 1)
	go func() { first <- a.TransferSyncWrite(ctx, n.Session, src.Addr(), dst, size) }()
	testbin.Eventually(t, "the first batch to reconnect", func() bool { return connector.PeerReconnecting(peer) })

	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	second := make(chan error, 1)
	go func() { second <- a.TransferSyncWrite(short, n.Session, src.Addr(), dst, size) }()
	select {
	case err := <-second:
		if !errors.Is(err, connector.ErrTimeout) {
			t.Fatalf("the batch behind the reconnect: %v, want ErrTimeout", err)
		}
	case err := <-first:
		t.Fatalf("the reconnecting batch ended (%v) before the one behind it", err)
	}
	select {
	case err := <-first:
		t.Fatalf("the reconnecting batch ended (%v) while its peer was stopped", err)
	default:
	}
	resume()
	select {
	case err := <-first:
		if err != nil {
			t.Fatalf("the reconnecting batch, once its peer runs again: %v", err)
		}
	case <-time.After(testbin.WaitLimit):
		t.Fatal("the reconnecting batch never ended")
	}
}
