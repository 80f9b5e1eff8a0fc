package tcp_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"

	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/plugins/transporttest"
	"github.com/kvconnect/kvconnect/transports/tcp/internal/wire"
)

// frameCounts is what a frameTap saw go by in one direction.
type frameCounts struct {
	groups, plain, grouped atomic.Int64 // group headers, frames outside groups, frames inside groups
	noFlag                 atomic.Int64 // requests without wire.FlagGroups
	noFeature              atomic.Int64 // responses without wire.FeatureGroups
	bad                    atomic.Pointer[string]
}

// frameTap is a proxy in front of a kvconnect target that parses the
// frames passing in each direction (groups included) and counts them.
type frameTap struct {
	*cutProxy
	req, rsp frameCounts
}

func newFrameTap(t *testing.T, target string) *frameTap {
	p := &frameTap{}
	p.cutProxy = newRelayProxy(t, target, func(dst, src net.Conn, toTarget bool) {
		if toTarget {
			p.relay(dst, src, &p.req, false)
		} else {
			p.relay(dst, src, &p.rsp, true)
		}
	})
	return p
}

// relay copies frames from src to dst, counting them in fc.
func (p *frameTap) relay(dst, src net.Conn, fc *frameCounts, responses bool) {
	fail := func(s string) { fc.bad.CompareAndSwap(nil, &s) }
	var hb [wire.HeaderSize]byte
	var hs []wire.Header
	for {
		if _, err := io.ReadFull(src, hb[:]); err != nil {
			return
		}
		var h wire.Header
		if err := h.Decode(hb[:]); err != nil {
			fail("undecodable header: " + err.Error())
			return
		}
		if _, err := dst.Write(hb[:]); err != nil {
			return
		}
		frames := []wire.Header{h}
		if h.Op == wire.OpGroup {
			tab := make([]byte, h.Length)
			if _, err := io.ReadFull(src, tab); err != nil {
				return
			}
			var err error
			if hs, err = wire.DecodeGroup(tab, hs, responses); err != nil {
				fail("bad group: " + err.Error())
				return
			}
			if _, err := dst.Write(tab); err != nil {
				return
			}
			frames = hs
			fc.groups.Add(1)
			fc.grouped.Add(int64(len(hs)))
		} else {
			fc.plain.Add(1)
		}
		var carried int64
		for _, f := range frames {
			carried += int64(f.Carries())
			if !responses && f.Status&wire.FlagGroups == 0 {
				fc.noFlag.Add(1)
			}
			if responses && f.Region&wire.FeatureGroups == 0 {
				fc.noFeature.Add(1)
			}
		}
		if _, err := io.CopyN(dst, src, carried); err != nil {
			return
		}
	}
}

func (fc *frameCounts) check(t *testing.T, dir string) {
	t.Helper()
	if s := fc.bad.Load(); s != nil {
		t.Fatalf("%s: %s", dir, *s)
	}
}

// TestGroupsNegotiated: two kvconnect nodes agree on groups on their
// own. Every request says the initiator reads groups and every response
// says the target does; the first burst on a connection goes out as
// plain frames (the initiator has not heard from the target yet), later
// bursts of WRITEs as groups; the bytes arrive intact both ways (READs
// are answered frame by frame: the target sends no groups, see serve).
func TestGroupsNegotiated(t *testing.T) {
	h := inproc(`{"connections":1}`)
	a, b := transporttest.NewNode(t, h, "a"), transporttest.NewNode(t, h, "b")
	const size, n = 64 << 10, 16
	src, dst := a.Alloc(t, size*n, 0), b.Alloc(t, size*n, 0)
	for i := range src.Bytes {
		src.Bytes[i] = byte(i*7 + i>>16)
	}
	tap := newFrameTap(t, string(b.Endpoint))
	peer, err := a.T.Connect(context.Background(), plugins.PeerInfo{Name: "b", Endpoint: []byte(tap.addr())})
	if err != nil {
		t.Fatal(err)
	}
	ops := func(kind plugins.OpKind, k int) []plugins.Op {
		var o []plugins.Op
		for i := range k {
			off := uint64(i * size)
			o = append(o, plugins.Op{Kind: kind, LocalRegion: src.ID, LocalOffset: off, RemoteRegion: dst.ID, RemoteOffset: off, Length: size})
		}
		return o
	}
	a.MustTransfer(t, peer, ops(plugins.OpWrite, 1))
	if g := tap.req.groups.Load(); g != 0 {
		t.Fatalf("the first burst went out as %d groups: the initiator cannot know yet that the target reads them", g)
	}
	a.MustTransfer(t, peer, ops(plugins.OpWrite, n))
	if !bytes.Equal(dst.Bytes, src.Bytes) {
		t.Fatal("the target's region differs from what was written")
	}
	if g := tap.req.groups.Load(); g == 0 {
		t.Fatalf("a burst of %d WRITEs after the first response went out as plain frames (%d), no group", n, tap.req.plain.Load())
	}
	clear(src.Bytes)
	a.MustTransfer(t, peer, ops(plugins.OpRead, n))
	if !bytes.Equal(src.Bytes, dst.Bytes) {
		t.Fatal("the READs brought back other bytes than the target holds")
	}
	tap.req.check(t, "requests")
	tap.rsp.check(t, "responses")
	if k := tap.req.noFlag.Load(); k != 0 {
		t.Fatalf("%d requests without FlagGroups", k)
	}
	if k := tap.rsp.noFeature.Load(); k != 0 {
		t.Fatalf("%d responses without FeatureGroups", k)
	}
}

// TestNoGroupsToV1Target: a target that never says it reads groups (a
// kvconnect node from before them) never gets one, however many bursts
// go to it.
func TestNoGroupsToV1Target(t *testing.T) {
	var groups, reqs atomic.Int32
	addr, _ := scriptedTarget(t, func(_, _ int, nc net.Conn, h wire.Header) {
		reqs.Add(1)
		if h.Op == wire.OpGroup {
			groups.Add(1)
			return // it would not understand it: the initiator fails
		}
		ack(nc, h)
	})
	a := transporttest.NewNode(t, inproc(`{"connections":1}`), "a")
	src := a.Alloc(t, 1<<20, 0)
	peer, err := a.T.Connect(context.Background(), plugins.PeerInfo{Name: "v1", Endpoint: []byte(addr)})
	if err != nil {
		t.Fatal(err)
	}
	var ops []plugins.Op
	for i := range 8 {
		ops = append(ops, plugins.Op{Kind: plugins.OpWrite, LocalRegion: src.ID, LocalOffset: uint64(i) << 16, RemoteRegion: 1, Length: 64 << 10})
	}
	for range 4 {
		a.MustTransfer(t, peer, ops)
	}
	if g := groups.Load(); g != 0 {
		t.Fatalf("a v1 target got %d groups among %d requests", g, reqs.Load())
	}
}

// TestNoGroupsToV1Initiator: an initiator whose requests do not carry
// FlagGroups (a kvconnect node from before groups) gets plain responses
// to a burst of READs, each saying the target reads groups.
func TestNoGroupsToV1Initiator(t *testing.T) {
	b := transporttest.NewNode(t, inproc(""), "b")
	dst := b.Alloc(t, 1<<20, 0)
	nc, err := net.Dial("tcp", string(b.Endpoint))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	var req [2 * wire.HeaderSize]byte
	(&wire.Header{Op: wire.OpRead, ReqID: 1, Region: uint64(dst.ID), Length: 4096}).Encode(req[:])
	(&wire.Header{Op: wire.OpRead, Status: wire.FlagFlush, ReqID: 2, Region: uint64(dst.ID), Offset: 4096, Length: 4096}).Encode(req[wire.HeaderSize:])
	if _, err := nc.Write(req[:]); err != nil {
		t.Fatal(err)
	}
	for id := uint64(1); id <= 2; id++ {
		var hb [wire.HeaderSize]byte
		if _, err := io.ReadFull(nc, hb[:]); err != nil {
			t.Fatal(err)
		}
		var h wire.Header
		if err := h.Decode(hb[:]); err != nil {
			t.Fatal(err)
		}
		if h.Op != wire.OpReadResp || h.ReqID != id || h.Region != wire.FeatureGroups || h.Length != 4096 {
			t.Fatalf("response %d: %+v, want a READ response of 4096 bytes with FeatureGroups in its region field", id, h)
		}
		if _, err := io.CopyN(io.Discard, nc, 4096); err != nil {
			t.Fatal(err)
		}
	}
}

// TestGroupOfResponsesRead: an initiator reads a burst's responses sent
// as one group (what FlagGroups allows a target to send): each READ's
// bytes land in its place, and nothing around them changes.
func TestGroupOfResponsesRead(t *testing.T) {
	var first wire.Header
	addr, _ := scriptedTarget(t, func(_, req int, nc net.Conn, h wire.Header) {
		if req%2 == 1 {
			first = h
			return
		}
		out := make([]byte, 3*wire.HeaderSize)
		g := wire.GroupHeader(2)
		g.Encode(out)
		(&wire.Header{Op: wire.OpReadResp, ReqID: first.ReqID, Length: first.Length}).Encode(out[wire.HeaderSize:])
		(&wire.Header{Op: wire.OpReadResp, ReqID: h.ReqID, Length: h.Length}).Encode(out[2*wire.HeaderSize:])
		for _, r := range []wire.Header{first, h} {
			for i := range r.Length {
				out = append(out, byte(r.ReqID*31+i))
			}
		}
		nc.Write(out)
	})
	a := transporttest.NewNode(t, inproc(`{"connections":1}`), "a")
	const size = 40 << 10
	dst := a.Alloc(t, 2*size, 4096)
	for i := range dst.Whole() {
		dst.Whole()[i] = 0xAA
	}
	peer, err := a.T.Connect(context.Background(), plugins.PeerInfo{Name: "g", Endpoint: []byte(addr)})
	if err != nil {
		t.Fatal(err)
	}
	a.MustTransfer(t, peer, []plugins.Op{
		{Kind: plugins.OpRead, LocalRegion: dst.ID, RemoteRegion: 1, Length: size},
		{Kind: plugins.OpRead, LocalRegion: dst.ID, LocalOffset: size, RemoteRegion: 1, Length: size},
	})
	whole := dst.Whole()
	// The two requests have consecutive ids: the second op's pattern
	// starts 31 above the first's unless their payloads were swapped.
	if d := whole[4096+size] - whole[4096]; d != 31 {
		t.Fatalf("the second op's bytes start %d above the first's, want 31 (payloads out of order)", d)
	}
	for i, c := range whole {
		want := byte(0xAA)
		if j := i - 4096; j >= 0 && j < 2*size {
			// Request ids are the transport's; the target's pattern
			// is checked relative to each op's first byte.
			base := whole[4096+(j/size)*size]
			want = base + byte(j%size)
		}
		if c != want {
			t.Fatalf("byte %d: %#x, want %#x", i, c, want)
		}
	}
}

// TestBadGroupOfResponsesFailsOps: a group of responses that answers
// more requests than are outstanding, or holds a request, fails the op
// with ErrProtocol instead of hanging or touching memory.
func TestBadGroupOfResponsesFailsOps(t *testing.T) {
	for _, tt := range []struct {
		name   string
		second wire.Header
	}{
		{"more responses than requests", wire.Header{Op: wire.OpReadResp, ReqID: 99, Length: 16}},
		{"a request inside", wire.Header{Op: wire.OpRead, ReqID: 99, Length: 16}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			addr, _ := scriptedTarget(t, func(_, _ int, nc net.Conn, h wire.Header) {
				out := make([]byte, 3*wire.HeaderSize)
				g := wire.GroupHeader(2)
				g.Encode(out)
				(&wire.Header{Op: wire.OpReadResp, ReqID: h.ReqID, Region: wire.FeatureGroups, Length: h.Length}).Encode(out[wire.HeaderSize:])
				tt.second.Encode(out[2*wire.HeaderSize:])
				nc.Write(append(out, make([]byte, h.Length+16)...))
			})
			a := transporttest.NewNode(t, inproc(`{"connections":1}`), "a")
			dst := a.Alloc(t, 4096, 4096)
			peer, err := a.T.Connect(context.Background(), plugins.PeerInfo{Name: "bad", Endpoint: []byte(addr)})
			if err != nil {
				t.Fatal(err)
			}
			for i := range dst.Whole() {
				dst.Whole()[i] = 0xAA
			}
			res, _ := a.Transfer(t, peer, []plugins.Op{{Kind: plugins.OpRead, LocalRegion: dst.ID, RemoteRegion: 1, Length: 4096}})
			if !errors.Is(res[0].Err, plugins.ErrProtocol) {
				t.Fatalf("op: %v, want ErrProtocol", res[0].Err)
			}
			for i, c := range dst.Whole() {
				if c != 0xAA {
					t.Fatalf("byte %d of the region and its guards was written (%#x)", i, c)
				}
			}
		})
	}
}
