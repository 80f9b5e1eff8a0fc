package tcp_test

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"

	"github.com/kvconnect/kvconnect/auth"
	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/plugins/transporttest"
	"github.com/kvconnect/kvconnect/transports/tcp/internal/wire"
)

func served(t *testing.T, n *transporttest.Node) plugins.ServedStats {
	t.Helper()
	st, err := n.T.(plugins.StatsReporter).Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func refusedFor(st plugins.ServedStats, reason string) uint64 {
	for _, r := range st.Refusals {
		if r.Reason == reason {
			return r.Count
		}
	}
	return 0
}

func servedCount(st plugins.ServedStats, kind plugins.OpKind, result string) (uint64, uint64) {
	for _, o := range st.Ops {
		if o.Op == kind && o.Result == result {
			return o.Ops, o.Bytes
		}
	}
	return 0, 0
}

// sendAndDrain writes b on a new data connection and reads until the
// node closes it (or, with want > 0, until want bytes came), so whatever
// the node counted for b is counted.
func sendAndDrain(t *testing.T, endpoint []byte, b []byte, want int) []byte {
	t.Helper()
	nc, err := net.Dial("tcp", string(endpoint))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.Write(b)
	nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	if want > 0 {
		got := make([]byte, want)
		n, _ := io.ReadFull(nc, got)
		return got[:n]
	}
	got, _ := io.ReadAll(nc)
	return got
}

// mooncakeHeader is a Mooncake TCP request header (24 bytes, v2).
func mooncakeHeader(size, addr uint64, write bool) []byte {
	var h [24]byte
	binary.LittleEndian.PutUint64(h[0:], size)
	binary.LittleEndian.PutUint64(h[8:], addr)
	h[16] = 0x80
	if write {
		h[16] |= 1
	}
	return h[:]
}

// TestStatsCountRefusalsAndMooncake: the tcp transport counts what it
// refused by reason (a malformed kvconnect frame, a Mooncake request
// outside every region, a data connection that fails authentication)
// and the Mooncake connections and bytes it served.
func TestStatsCountRefusalsAndMooncake(t *testing.T) {
	b := transporttest.NewNode(t, inproc(""), "b")
	dst := b.Alloc(t, 64<<10, 0)
	st0 := served(t, b)

	var hb [wire.HeaderSize]byte
	(&wire.Header{Op: wire.OpWriteAck, Region: uint64(dst.ID)}).Encode(hb[:]) // a response sent as a request
	sendAndDrain(t, b.Endpoint, hb[:], 0)
	st1 := served(t, b)
	if n := refusedFor(st1, plugins.RefusedBadRequest) - refusedFor(st0, plugins.RefusedBadRequest); n != 1 {
		t.Errorf("bad_request refusals after a malformed frame: %d, want 1", n)
	}

	got := sendAndDrain(t, b.Endpoint, mooncakeHeader(16, 8, true), 0)
	if len(got) != 8 || binary.LittleEndian.Uint64(got) != 0x4D43545600000001 {
		t.Fatalf("Mooncake request at address 8: answered % x, want the rejected status", got)
	}
	payload := make([]byte, 4096)
	transporttest.Fill(payload, 3)
	got = sendAndDrain(t, b.Endpoint, append(mooncakeHeader(4096, dst.Addr+100, true), payload...), 8)
	if len(got) != 8 || binary.LittleEndian.Uint64(got) != 0x4D43545600000000 {
		t.Fatalf("Mooncake WRITE into the region: answered % x, want the ok status", got)
	}
	st2 := served(t, b)
	if n := st2.MooncakeConnections - st1.MooncakeConnections; n != 2 {
		t.Errorf("Mooncake connections served: %d, want 2", n)
	}
	if n := refusedFor(st2, plugins.RefusedUnknownRegion) - refusedFor(st1, plugins.RefusedUnknownRegion); n != 1 {
		t.Errorf("unknown_region refusals after a Mooncake request outside every region: %d, want 1", n)
	}
	o2, b2 := servedCount(st2, plugins.OpWrite, plugins.ResultRefused)
	o1, b1 := servedCount(st1, plugins.OpWrite, plugins.ResultRefused)
	if o2-o1 != 1 || b2-b1 != 16 {
		t.Errorf("refused WRITEs: %d of %d bytes, want 1 of 16", o2-o1, b2-b1)
	}
	o2, b2 = servedCount(st2, plugins.OpWrite, plugins.ResultCompleted)
	o1, b1 = servedCount(st1, plugins.OpWrite, plugins.ResultCompleted)
	if o2-o1 != 1 || b2-b1 != 4096 {
		t.Errorf("completed WRITEs: %d of %d bytes, want 1 of 4096", o2-o1, b2-b1)
	}

	k, err := auth.NewKeyring("stats-test-secret-0123456789")
	if err != nil {
		t.Fatal(err)
	}
	h := inproc("")
	h.Auth = k
	c := transporttest.NewNode(t, h, "c")
	sc0 := served(t, c)
	sendAndDrain(t, c.Endpoint, hb[:], 0) // no proof of the secret
	if n := refusedFor(served(t, c), plugins.RefusedUnauthenticated) - refusedFor(sc0, plugins.RefusedUnauthenticated); n != 1 {
		t.Errorf("unauthenticated refusals after a connection without the secret: %d, want 1", n)
	}
}
