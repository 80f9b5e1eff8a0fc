package tcp_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/plugins/transporttest"
	"github.com/kvconnect/kvconnect/transports/tcp/internal/wire"
)

// TestWriteAnsweredBeforeItsPayloadWasRead: a peer that acknowledges a
// WRITE as soon as it has its header, before reading the payload (a
// buggy or hostile one), does not end the op while this side still
// sends the payload from the region. Transfer returns only once every
// byte has left the process: memory changed after it returns never
// reaches the peer. Without the writer's hold on the op the response
// completes it while tens of MiB still wait to be written, and the
// bytes changed after Transfer returned arrive at the peer.
func TestWriteAnsweredBeforeItsPayloadWasRead(t *testing.T) {
	const size = 32 << 20 // far more than the socket buffers hold
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()

	returned := make(chan struct{}) // Transfer returned
	got := make(chan error, 1)      // what the peer found in the payload
	want := make([]byte, size)
	for i := range want {
		want[i] = byte(i*13 + i>>12)
	}
	go func() {
		got <- func() error {
			nc, err := ln.Accept()
			if err != nil {
				return err
			}
			defer nc.Close()
			var hb [wire.HeaderSize]byte
			if _, err := io.ReadFull(nc, hb[:]); err != nil {
				return fmt.Errorf("reading the request: %v", err)
			}
			var h wire.Header
			if err := h.Decode(hb[:]); err != nil {
				return err
			}
			if h.Op != wire.OpWrite || h.Length != size {
				return fmt.Errorf("request %s of %d bytes, want a WRITE of %d", h.Op, h.Length, size)
			}
			resp := wire.Header{Op: wire.OpWriteAck, ReqID: h.ReqID}
			resp.Encode(hb[:])
			if _, err := nc.Write(hb[:]); err != nil {
				return err
			}
			// Read the payload only once Transfer has returned, or, when it
			// rightly waits for the payload, after a while: the test passes
			// with the fix whatever the while is.
			select {
			case <-returned:
			case <-time.After(300 * time.Millisecond):
			}
			payload := make([]byte, size)
			if _, err := io.ReadFull(nc, payload); err != nil {
				return fmt.Errorf("reading the payload: %v", err)
			}
			if i := firstDiff(payload, want); i >= 0 {
				return fmt.Errorf("payload byte %d of %d is %#x, want %#x: written from memory after the op had completed", i, size, payload[i], want[i])
			}
			return nil
		}()
	}()

	a := transporttest.NewNode(t, inproc(`{"connections":1,"chunk_size":"32MiB"}`), "a")
	src := a.Alloc(t, size, 0)
	copy(src.Bytes, want)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	peer, err := a.T.Connect(ctx, plugins.PeerInfo{Name: "early", Endpoint: []byte(ln.Addr().String())})
	if err != nil {
		t.Fatal(err)
	}
	ops := []plugins.Op{{Kind: plugins.OpWrite, LocalRegion: src.ID, RemoteRegion: 1, Length: size}}
	res := make([]plugins.OpResult, 1)
	if err := a.T.Transfer(ctx, peer, ops, res); err != nil {
		t.Fatal(err)
	}
	close(returned)
	for i := range src.Bytes {
		src.Bytes[i] = 0xee // what the owner does with memory it was told is free
	}
	if res[0].Err != nil {
		t.Fatalf("the WRITE failed: %v", res[0].Err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
}

// firstDiff is the index of the first byte where a and b differ, or -1.
func firstDiff(a, b []byte) int {
	if bytes.Equal(a, b) {
		return -1
	}
	for i := range a {
		if i >= len(b) || a[i] != b[i] {
			return i
		}
	}
	return len(a)
}
