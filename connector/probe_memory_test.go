package connector_test

import (
	"context"
	"errors"
	"testing"

	"github.com/kvconnect/kvconnect/connector"
)

// TestProbeReleasesItsAnswer: Probe (Mooncake's send_probe, which serving
// stacks call as a health check, often) gives back the memory its answer
// took from max_handshake_memory; a leak there starved Open and
// reconnects once enough probes had run.
func TestProbeReleasesItsAnswer(t *testing.T) {
	a, b := newNode(t), newNode(t)
	for range 50 {
		if err := a.Probe(context.Background(), b.SessionID()); err != nil {
			t.Fatal(err)
		}
	}
	if m := a.Status().HandshakeMemory; m.InUse != 0 {
		t.Fatalf("after 50 probes the node holds %d bytes of handshake memory (peak %d), want 0", m.InUse, m.Peak)
	}
}

// TestAddressTransfersAfterCloseSayClosed: the Mooncake-style calls by
// address (TransferSyncWrite, BatchTransferSync, SubmitAddrs) on a closed
// node fail with ErrClosed, not as an unknown local region.
func TestAddressTransfersAfterCloseSayClosed(t *testing.T) {
	a, b := newNode(t), newNode(t)
	ctx := context.Background()
	src := alloc(t, a, 4096)
	alloc(t, b, 4096)
	peer, err := a.Open(ctx, b.SessionID())
	if err != nil {
		t.Fatal(err)
	}
	dst := peer.Regions()[0].Addr
	a.Close()
	if err := a.TransferSyncWrite(ctx, b.SessionID(), src.Addr(), dst, 4096); !errors.Is(err, connector.ErrClosed) {
		t.Errorf("TransferSyncWrite after Close: %v, want ErrClosed", err)
	}
	if _, err := a.SubmitAddrs(ctx, connector.OpRead, b.SessionID(), []uint64{src.Addr()}, []uint64{dst}, []uint64{4096}); !errors.Is(err, connector.ErrClosed) {
		t.Errorf("SubmitAddrs after Close: %v, want ErrClosed", err)
	}
}
