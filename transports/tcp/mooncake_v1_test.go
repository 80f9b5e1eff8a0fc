package tcp_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/plugins/transporttest"
)

// TestMooncakeV1WritesConfirmed: over Mooncake's v1 protocol, which
// acknowledges no WRITE, a WRITE the peer rejects fails (instead of
// looking done), and a READ on another connection right after a WRITE
// sees its bytes.
func TestMooncakeV1WritesConfirmed(t *testing.T) {
	h := inproc(`{"mooncake_lanes":8}`)
	h.PeerEndpoint = mooncakeEndpoint(t, 1)
	a := transporttest.NewNode(t, h, "a")
	b := transporttest.NewNode(t, h, "b")
	const size = 1 << 20
	src, back := a.Alloc(t, size, 0), a.Alloc(t, size, 0)
	dst := b.Alloc(t, size, 0)
	gone := b.Alloc(t, 4096, 0)
	peer := a.Connect(t, b)
	for i := 0; i < 20; i++ {
		transporttest.Fill(src.Bytes, uint64(100+i))
		a.MustTransfer(t, peer, []plugins.Op{{Kind: plugins.OpWrite, LocalRegion: src.ID, RemoteRegion: dst.ID, Length: size}})
		a.MustTransfer(t, peer, []plugins.Op{{Kind: plugins.OpRead, LocalRegion: back.ID, RemoteRegion: dst.ID, Length: size}})
		if !bytes.Equal(back.Bytes, src.Bytes) {
			t.Fatalf("round %d: a READ right after a v1 WRITE did not see it", i)
		}
	}
	b.Free(t, gone)
	res, _ := a.Transfer(t, peer, []plugins.Op{{Kind: plugins.OpWrite, LocalRegion: src.ID, RemoteRegion: gone.ID, Length: 4096}})
	if !errors.Is(res[0].Err, plugins.ErrPeerUnreachable) || !strings.Contains(res[0].Err.Error(), "not confirmed") {
		t.Fatalf("a v1 WRITE the peer rejected: %v, want a failure saying it was not confirmed", res[0].Err)
	}
}
