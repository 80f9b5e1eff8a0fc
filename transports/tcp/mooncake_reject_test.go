package tcp_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/plugins/transporttest"
)

// TestMooncakeRejectedWriteSaysWhy: a WRITE over Mooncake's protocol v2
// to a region the target deregistered since the initiator connected (a
// stale descriptor) fails as the region error the target's status says,
// not as a broken connection: the target takes the payload the client
// is sending before it closes, so the close does not reset the
// connection under the client's write.
func TestMooncakeRejectedWriteSaysWhy(t *testing.T) {
	h := inproc(`{"chunk_size":"64MiB"}`)
	h.PeerEndpoint = mooncakeEndpoint(t, 2)
	a := transporttest.NewNode(t, h, "a")
	b := transporttest.NewNode(t, h, "b")
	const size = 64 << 20 // far more than the sockets' buffers: the client is still writing when the target rejects
	src := a.Alloc(t, size, 0)
	dst := b.Alloc(t, size, 0)
	peer := a.Connect(t, b)
	b.Free(t, dst)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, chunk := range []uint64{1 << 20, size} {
		res := make([]plugins.OpResult, 1)
		ops := []plugins.Op{{Kind: plugins.OpWrite, LocalRegion: src.ID, RemoteRegion: dst.ID, Length: chunk}}
		if err := a.T.Transfer(ctx, peer, ops, res); err != nil {
			t.Fatal(err)
		}
		if err := res[0].Err; !errors.Is(err, plugins.ErrUnknownRegion) || errors.Is(err, plugins.ErrPeerUnreachable) {
			t.Fatalf("a %d-byte WRITE to a deregistered region: %v; want the target's rejection (ErrUnknownRegion), not a broken connection", chunk, err)
		}
	}
}
