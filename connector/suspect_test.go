package connector_test

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kvconnect/kvconnect/connector"
	"github.com/kvconnect/kvconnect/internal/testbin"
	"go.uber.org/zap/zaptest"
)

// TestStoppedPeerBecomesSuspect: a peer that stops answering (SIGSTOP, as
// a hung process or a host behind a dead link) costs one batch its
// transfer_timeout; later batches to it fail at once saying why, and once
// it answers again (SIGCONT) batches over the same Peer work again.
func TestStoppedPeerBecomesSuspect(t *testing.T) {
	n := serve(t, nil)
	session, pgid := n.Session, n.PGID
	cfg := connector.Config{Protocol: "tcp", PluginDir: pluginDir(t), TransferTimeout: 2 * time.Second}
	a, err := connector.New(context.Background(), cfg, connector.WithLogger(zaptest.NewLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx := context.Background()
	peer, err := a.Open(ctx, session)
	if err != nil {
		t.Fatal(err)
	}
	src := alloc(t, a, 1<<20)
	dst := peer.Regions()[0].Addr
	write := func() error { return a.TransferSyncWrite(ctx, session, src.Addr(), dst, 1<<20) }
	if err := write(); err != nil {
		t.Fatalf("before the stop: %v", err)
	}

	testbin.Stop(t, pgid, true)
	start := time.Now()
	err = write()
	if !errors.Is(err, connector.ErrTimeout) {
		t.Fatalf("write to a stopped peer: %v, want ErrTimeout", err)
	}
	if d := time.Since(start); d < cfg.TransferTimeout/2 {
		t.Fatalf("write to a stopped peer failed after %v, before the transfer timeout %v: %v", d, cfg.TransferTimeout, err)
	}

	// Failed by suspicion, at once: not ErrTimeout, which waiting for the
	// transfer timeout again would give.
	start = time.Now()
	err = write()
	if !errors.Is(err, connector.ErrPeerUnreachable) || !strings.Contains(err.Error(), "suspect") {
		t.Fatalf("second write to a stopped peer: %v, want a fast suspect error", err)
	}
	t.Logf("second write to the stopped peer failed after %v: %v", time.Since(start), err)

	if err := syscall.Kill(-pgid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(testbin.WaitLimit)
	for {
		err := write()
		if err == nil {
			break
		}
		if !errors.Is(err, connector.ErrPeerUnreachable) || time.Now().After(deadline) {
			t.Fatalf("after SIGCONT: %v", err)
		}
		time.Sleep(50 * time.Millisecond) // wait for the prober
	}
	if p2, err := a.Open(ctx, session); err != nil || p2 != peer {
		t.Fatalf("after recovery Open returned %p, %v; want the same Peer %p", p2, err, peer)
	}
}
