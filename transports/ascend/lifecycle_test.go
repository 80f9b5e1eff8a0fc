package ascend

import (
	"context"
	"errors"
	"testing"

	"github.com/kvconnect/kvconnect/plugins"
)

// TestCallsSayNotInitializedThenClosed: the transport never comes up
// here (no NPU data path), so its calls fail with ErrNotInitialized, and
// after Close with ErrClosed, as every transport's do (the conformance
// suite's rule; it cannot run on a transport whose Init always fails).
func TestCallsSayNotInitializedThenClosed(t *testing.T) {
	ctx := context.Background()
	tr := New()
	calls := func() []error {
		_, reg := tr.RegisterRegion(ctx, plugins.Region{ID: 1})
		_, conn := tr.Connect(ctx, plugins.PeerInfo{Name: "x"})
		res := make([]plugins.OpResult, 1)
		return []error{reg, tr.DeregisterRegion(ctx, 1), conn, tr.Disconnect(ctx, 1), tr.Transfer(ctx, 1, make([]plugins.Op, 1), res), res[0].Err}
	}
	for i, err := range calls() {
		if !errors.Is(err, plugins.ErrNotInitialized) {
			t.Errorf("call %d before Close: %v, want ErrNotInitialized", i, err)
		}
	}
	if err := tr.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for i, err := range calls() {
		if !errors.Is(err, plugins.ErrClosed) {
			t.Errorf("call %d after Close: %v, want ErrClosed", i, err)
		}
	}
}
