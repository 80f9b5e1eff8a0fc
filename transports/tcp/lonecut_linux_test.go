//go:build linux

package tcp

import (
	"context"
	"errors"
	"net"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/plugins/transporttest"
	"github.com/kvconnect/kvconnect/transports/tcp/internal/wire"
)

// stallTarget accepts connections with the smallest receive buffer the
// kernel allows (set on the listener, so the window it advertises is small
// from the start) and hands each to serve; serve returning closes it. It
// returns the address.
func stallTarget(t *testing.T, serve func(nc net.Conn)) string {
	t.Helper()
	lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, 1) })
		return serr
	}}
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer nc.Close()
				serve(nc)
			}()
		}
	}()
	return ln.Addr().String()
}

// TestLoneWriteCutByItsContext: a lone small WRITE that its caller writes
// itself (enqueue's direct write) to a target that reads nothing waits for
// room in the socket; its context's end stops that write, a cancellation
// as well as a deadline (a cancellation used to be ignored until the
// deadline, or op_timeout: a batch freed from C or Python held its caller,
// and its WRITE could land once the target read again), and the op fails
// with the context's error (ErrCanceled, ErrTimeout), not as a lost peer
// (the connector would then drop a peer that is fine).
func TestLoneWriteCutByItsContext(t *testing.T) {
	for _, tc := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		want error
	}{
		{"canceled", func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) }, plugins.ErrCanceled},
		{"deadline", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 300*time.Millisecond)
		}, plugins.ErrTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			release := make(chan struct{})
			defer close(release)
			addr := stallTarget(t, func(net.Conn) { <-release })
			h := transporttest.Harness{New: func(*testing.T) plugins.Transport { return New() }, Options: []byte(`{"connections":1,"op_timeout":"10m"}`)}
			a := transporttest.NewNode(t, h, "a")
			src := a.Alloc(t, directWriteMax, 0)
			peer, err := a.T.Connect(context.Background(), plugins.PeerInfo{Name: "silent", Endpoint: []byte(addr)})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := tc.ctx()
			defer cancel()
			hooked := false
			testBeforeLoneWrite = func(nc net.Conn) {
				hooked = true
				// The smallest send buffer: with the target's small window,
				// the 16 KiB request cannot leave; for the cancellation
				// case, the context ends before the write begins.
				nc.(*net.TCPConn).SetWriteBuffer(1)
				if tc.want == plugins.ErrCanceled {
					cancel()
				}
			}
			t.Cleanup(func() { testBeforeLoneWrite = nil })
			res := make([]plugins.OpResult, 1)
			done := make(chan error, 1)
			go func() {
				done <- a.T.Transfer(ctx, peer, []plugins.Op{{Kind: plugins.OpWrite, LocalRegion: src.ID, RemoteRegion: 1, Length: directWriteMax}}, res)
			}()
			select {
			case <-done:
			case <-time.After(2 * time.Minute):
				t.Fatal("Transfer still runs 2 minutes after its context ended: the lone write waits for room regardless")
			}
			if !hooked {
				t.Fatal("the op was not written by its caller (enqueue's direct write)")
			}
			if !errors.Is(res[0].Err, tc.want) || errors.Is(res[0].Err, plugins.ErrPeerUnreachable) {
				t.Fatalf("the op cut by its context: %v; want %v, not ErrPeerUnreachable", res[0].Err, tc.want)
			}
		})
	}
}

// TestLoneReadCutMidAnswer: a lone small READ whose answer stops half way
// (the target sent the header and half the payload) fails, at its
// context's deadline, with ErrTimeout, not as a lost peer.
func TestLoneReadCutMidAnswer(t *testing.T) {
	const size = 8 << 10
	release := make(chan struct{})
	defer close(release)
	addr := stallTarget(t, func(nc net.Conn) {
		var hb [wire.HeaderSize]byte
		if _, err := nc.Read(hb[:]); err != nil {
			return
		}
		var h wire.Header
		if h.Decode(hb[:]) != nil {
			return
		}
		(&wire.Header{Op: wire.OpReadResp, ReqID: h.ReqID, Length: h.Length}).Encode(hb[:])
		nc.Write(hb[:])
		nc.Write(make([]byte, h.Length/2))
		<-release
	})
	h := transporttest.Harness{New: func(*testing.T) plugins.Transport { return New() }, Options: []byte(`{"connections":1,"op_timeout":"10m"}`)}
	a := transporttest.NewNode(t, h, "a")
	dst := a.Alloc(t, size, 0)
	peer, err := a.T.Connect(context.Background(), plugins.PeerInfo{Name: "halfway", Endpoint: []byte(addr)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	res := make([]plugins.OpResult, 1)
	a.T.Transfer(ctx, peer, []plugins.Op{{Kind: plugins.OpRead, LocalRegion: dst.ID, RemoteRegion: 1, Length: size}}, res)
	if !errors.Is(res[0].Err, plugins.ErrTimeout) || errors.Is(res[0].Err, plugins.ErrPeerUnreachable) {
		t.Fatalf("a lone READ cut mid-answer by its deadline: %v; want ErrTimeout, not ErrPeerUnreachable", res[0].Err)
	}
}
