package tcp

import (
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"

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
	nc.SetDeadline(time.Now().Add(time.Minute)) // a WRITE no server takes fails, not hangs
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

// mooncakeTarget is a target node (the tcp transport in-process) with a
// 4 KiB region for Mooncake WRITEs, and its transport.
func mooncakeTarget(t *testing.T) (*transporttest.Node, *transporttest.Mem, *Transport) {
	h := transporttest.Harness{New: func(*testing.T) plugins.Transport { return New() }}
	b := transporttest.NewNode(t, h, "b")
	return b, b.Alloc(t, 4096, 0), b.T.(*Transport)
}

// TestServersOutliveConnections: connections that come one after another
// (a Mooncake initiator with its pool off opens one per request) are
// served by the same few goroutines, each waiting for the next
// connection once its own ends, not by a new goroutine each; Close ends
// the waiting ones (it waits for them).
func TestServersOutliveConnections(t *testing.T) {
	b, dst, tr := mooncakeTarget(t)
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

// TestAcceptingGoesOnWhileServing: connections that are open and silent
// (each holds a server waiting for its first header) do not keep the
// next connection from being accepted and served: with 32 of them open,
// a Mooncake WRITE on a new connection lands. A design that served a
// connection on the goroutine that accepted it would have to pass the
// accept role on first (docs/DATAPATH-ROUNDS.md, twenty-eighth round).
func TestAcceptingGoesOnWhileServing(t *testing.T) {
	b, dst, tr := mooncakeTarget(t)
	const silent = 32
	var held []net.Conn
	t.Cleanup(func() {
		for _, nc := range held {
			nc.Close()
		}
	})
	for range silent {
		nc, err := net.Dial("tcp", string(b.Endpoint))
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, nc)
	}
	p := []byte{9, 8, 7, 6}
	mooncakeWrite(t, string(b.Endpoint), dst.Addr, p) // fails after a minute if no server takes it
	if string(dst.Bytes[:4]) != string(p) {
		t.Fatal("the WRITE beside silent connections did not land")
	}
	// Each silent connection holds a server of its own (the WRITE's
	// connection came after them on the one listener).
	if n := tr.servers.started.Load(); n < silent+1 {
		t.Fatalf("%d servers started for %d silent connections and one WRITE", n, silent)
	}
}
