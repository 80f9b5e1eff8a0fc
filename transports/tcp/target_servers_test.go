package tcp

import (
	"encoding/binary"
	"io"
	"net"
	"testing"

	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/plugins/transporttest"
	"github.com/kvconnect/kvconnect/transports/tcp/internal/mcwire"
)

// mooncakeWrite sends one Mooncake v2 WRITE of p to addr on a new
// connection to ep, waits for its status and closes: what a Mooncake
// initiator with its connection pool off does per request.
func mooncakeWrite(t *testing.T, ep string, addr uint64, p []byte) {
	t.Helper()
	nc, err := net.Dial("tcp", ep)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	var hb [mcwire.HeaderSize]byte
	mcwire.Header{Size: uint64(len(p)), Addr: addr, Write: true, V2: true}.Encode(&hb)
	if _, err := nc.Write(append(hb[:], p...)); err != nil {
		t.Fatal(err)
	}
	var sb [mcwire.StatusSize]byte
	if _, err := io.ReadFull(nc, sb[:]); err != nil {
		t.Fatalf("status of a Mooncake WRITE: %v", err)
	}
	if st := binary.LittleEndian.Uint64(sb[:]); st != mcwire.StatusOK {
		t.Fatalf("status of a Mooncake WRITE: %#x, want ok", st)
	}
}

// TestServersOutliveConnections: connections that come one after another
// (a Mooncake initiator with its pool off opens one per request) are
// served by the same few goroutines, each waiting for the next
// connection once its own ends, not by a new goroutine each; Close ends
// the waiting ones (it waits for them).
func TestServersOutliveConnections(t *testing.T) {
	h := transporttest.Harness{New: func(*testing.T) plugins.Transport { return New() }}
	b := transporttest.NewNode(t, h, "b")
	dst := b.Alloc(t, 4096, 0)
	tr := b.T.(*Transport)
	const conns = 50
	for i := range conns {
		p := []byte{byte(i), 1, 2, 3}
		mooncakeWrite(t, string(b.Endpoint), dst.Addr, p)
		if string(dst.Bytes[:4]) != string(p) {
			t.Fatalf("connection %d: the WRITE did not land", i)
		}
	}
	// One connection at a time: a server ending its connection can
	// overlap the next one, so two are needed, a few under load; a
	// goroutine per connection would be 50.
	if n := tr.servers.started.Load(); n > 5 {
		t.Fatalf("%d server goroutines for %d connections one after another", n, conns)
	}
}
