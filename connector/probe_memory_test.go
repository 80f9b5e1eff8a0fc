package connector_test

import (
	"context"
	"testing"
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
