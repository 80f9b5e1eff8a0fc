package tcp_test

import (
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/plugins/transporttest"
	"github.com/kvconnect/kvconnect/transports/tcp"
	"github.com/kvconnect/kvconnect/transports/tcp/internal/mcwire"
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

// TestCanceledBatchDoesNotFailTheNext: a batch whose context has ended
// before it runs fails alone: its lanes' dials (and, for kvconnect's
// framing, its connections' redials) under the ended context say nothing
// of the peer, and must not fail the next batch's for the redial backoff.
func TestCanceledBatchDoesNotFailTheNext(t *testing.T) {
	for _, mooncake := range []bool{false, true} {
		name := "kvconnect"
		if mooncake {
			name = "mooncake"
		}
		t.Run(name, func(t *testing.T) {
			h := inproc(`{}`)
			if mooncake {
				h.PeerEndpoint = mooncakeEndpoint(t, 2)
			}
			a := transporttest.NewNode(t, h, "a")
			b := transporttest.NewNode(t, h, "b")
			src := a.Alloc(t, 4<<20, 0)
			dst := b.Alloc(t, 4<<20, 0)
			peer := a.Connect(t, b)
			ops := make([]plugins.Op, 16)
			for i := range ops {
				ops[i] = plugins.Op{Kind: plugins.OpWrite, LocalRegion: src.ID, RemoteRegion: dst.ID, RemoteOffset: uint64(i) << 18, Length: 1 << 18}
			}
			for round := 0; round < 10; round++ {
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				a.T.Transfer(ctx, peer, ops, make([]plugins.OpResult, len(ops)))
				res, err := a.Transfer(t, peer, ops)
				if err != nil {
					t.Fatalf("round %d: the batch after a canceled one: %v", round, err)
				}
				for i, r := range res {
					if r.Err != nil {
						t.Fatalf("round %d: op %d of the batch after a canceled one: %v", round, i, r.Err)
					}
				}
			}
		})
	}
}

// TestRealMooncakeRejectionOfAWriteSaysWhy: Mooncake's own v2 server
// rejects a WRITE by sending its status and closing without reading the
// payload (tcp_transport_session_impl.h), which resets the connection
// under the client's write. The client still reports the rejection the
// status carried, not a broken connection.
func TestRealMooncakeRejectionOfAWriteSaysWhy(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer nc.Close() // payload unread: the close resets the connection
				var hb [mcwire.HeaderSize]byte
				if _, err := io.ReadFull(nc, hb[:]); err != nil {
					return
				}
				var sb [mcwire.StatusSize]byte
				mcwire.EncodeStatus(&sb, mcwire.StatusRejected)
				nc.Write(sb[:])
			}()
		}
	}()
	a := transporttest.NewNode(t, inproc(`{"chunk_size":"64MiB"}`), "a")
	const size = 64 << 20
	src := a.Alloc(t, size, 0)
	host, port, _ := net.SplitHostPort(ln.Addr().String())
	pn, _ := strconv.Atoi(port)
	peer, err := a.T.Connect(context.Background(), plugins.PeerInfo{Name: "mooncake", Endpoint: tcp.MooncakeEndpoint(host, pn, 2),
		Regions: []plugins.RemoteRegion{{ID: 1, Addr: 0x7f0000000000, Size: size}}})
	if err != nil {
		t.Fatal(err)
	}
	res, _ := a.Transfer(t, peer, []plugins.Op{{Kind: plugins.OpWrite, LocalRegion: src.ID, RemoteRegion: 1, Length: size}})
	if err := res[0].Err; err == nil || errors.Is(err, plugins.ErrPeerUnreachable) {
		t.Fatalf("a WRITE Mooncake's server rejected: %v; want the rejection, not a broken connection", err)
	}
	t.Log(res[0].Err)
}
