package connector_test

import (
	"bytes"
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/kvconnect/kvconnect/connector"
	"github.com/kvconnect/kvconnect/internal/pluginrpc"
	"github.com/kvconnect/kvconnect/internal/testbin"
	"github.com/kvconnect/kvconnect/plugins/transporttest"
)

// TestTimedOutWriteDoesNotLandLater stops a target (SIGSTOP, its plugin
// too) while a WRITE is on its way: the WRITE times out at the initiator,
// whose connection is reset. When the target runs again, the bytes still
// queued in its socket must not reach memory: the initiator reported the
// WRITE failed and may since have written something else there (the soak
// found such late WRITEs overwriting newer blocks). The block still holds
// what was written before the stop.
//
// Both ways a WRITE times out: the transport's op_timeout (the connection
// made no progress), and the batch's own deadline (transfer_timeout, here
// shorter than op_timeout: the transport gives up on the batch, and the
// host waits for the plugin to have done so, through the shared-memory
// ring or, with rings off, over gRPC).
func TestTimedOutWriteDoesNotLandLater(t *testing.T) {
	for _, tc := range []struct {
		name     string
		transfer time.Duration
		op       string
		ringsOff bool
	}{
		{"op_timeout", 10 * time.Second, "1s", false},
		{"transfer_timeout", time.Second, "60s", false},
		{"transfer_timeout_over_grpc", time.Second, "60s", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.ringsOff {
				t.Setenv(pluginrpc.EnvRings, "0")
			}
			timedOutWriteDoesNotLandLater(t, tc.transfer, tc.op)
		})
	}
}

func timedOutWriteDoesNotLandLater(t *testing.T, transferTimeout time.Duration, opTimeout string) {
	n := serve(t, nil)
	cfg := connector.Config{Protocol: "tcp", PluginDir: pluginDir(t), TransferTimeout: transferTimeout,
		Transports: map[string]map[string]any{"tcp": {"op_timeout": opTimeout}}}
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
	const size = 64 << 10
	before, late, back := alloc(t, a, size), alloc(t, a, size), alloc(t, a, size)
	transporttest.Fill(before.Bytes(), 1)
	transporttest.Fill(late.Bytes(), 2)
	dst := peer.Regions()[0].Addr
	if err := a.TransferSyncWrite(ctx, n.Session, before.Addr(), dst, size); err != nil {
		t.Fatal(err)
	}

	testbin.Stop(t, n.PGID, true)
	err = a.TransferSyncWrite(ctx, n.Session, late.Addr(), dst, size)
	if !errors.Is(err, connector.ErrTimeout) {
		syscall.Kill(-n.PGID, syscall.SIGCONT)
		t.Fatalf("WRITE to a stopped target: %v, want ErrTimeout", err)
	}
	if err := syscall.Kill(-n.PGID, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	// Read the block back once the target answers again (the peer is
	// suspect until its prober sees it), and once more a little later.
	deadline := time.Now().Add(testbin.WaitLimit)
	for {
		err := a.TransferSyncRead(ctx, n.Session, back.Addr(), dst, size)
		if err == nil {
			break
		}
		if !errors.Is(err, connector.ErrPeerUnreachable) || time.Now().After(deadline) {
			t.Fatalf("READ after SIGCONT: %v", err)
		}
		time.Sleep(50 * time.Millisecond) // polling for the prober
	}
	for range 2 {
		if bytes.Equal(back.Bytes(), late.Bytes()) {
			t.Fatal("the WRITE that timed out landed after the target resumed")
		}
		if !bytes.Equal(back.Bytes(), before.Bytes()) {
			t.Fatal("the block holds neither what was written before the stop nor the timed-out WRITE")
		}
		time.Sleep(300 * time.Millisecond) // a late WRITE would have landed by now
		if err := a.TransferSyncRead(ctx, n.Session, back.Addr(), dst, size); err != nil {
			t.Fatal(err)
		}
	}
}
