package simpletcp_test

import (
	"context"
	"testing"

	"github.com/kvconnect/kvconnect/examples/transport-plugin/simpletcp"
	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/plugins/transporttest"
)

// TestConformance runs kvconnect's conformance suite in-process, over an
// in-memory gRPC connection (the plugin protocol without a process) and
// against the plugin binary.
func TestConformance(t *testing.T) {
	transporttest.RunModes(t, transporttest.Modes{
		New:    func() plugins.Transport { return simpletcp.New() },
		Binary: transporttest.BuildPlugin(t, "github.com/kvconnect/kvconnect/examples/transport-plugin/cmd/kvconnect-transport-simpletcp"),
	})
}

// TestBatchAfterACanceledOne: a batch whose context ended before it ran
// fails alone; the next batch to the peer succeeds (the deadline the
// first one's cancellation set does not stay on the connection).
func TestBatchAfterACanceledOne(t *testing.T) {
	h := transporttest.Harness{New: func(*testing.T) plugins.Transport { return simpletcp.New() }}
	a, b := transporttest.NewNode(t, h, "a"), transporttest.NewNode(t, h, "b")
	src, dst := a.Alloc(t, 4096, 0), b.Alloc(t, 4096, 0)
	peer := a.Connect(t, b)
	ops := []plugins.Op{{Kind: plugins.OpWrite, LocalRegion: src.ID, RemoteRegion: dst.ID, Length: 4096}}
	for round := 0; round < 3; round++ {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		a.T.Transfer(ctx, peer, ops, make([]plugins.OpResult, 1))
		a.MustTransfer(t, peer, ops)
	}
}
