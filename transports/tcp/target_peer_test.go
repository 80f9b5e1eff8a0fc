package tcp_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/kvconnect/kvconnect/plugins/transporttest"
	"github.com/kvconnect/kvconnect/transports/tcp/internal/wire"
)

// The target against initiators that do what kvconnect's own never does:
// a WRITE of no bytes inside a group, READs with no FlagFlush, an
// initiator that stops reading its answers.

// rawInitiator dials a target's data port and speaks kvconnect's framing
// by hand.
func rawInitiator(t *testing.T, endpoint []byte) net.Conn {
	t.Helper()
	nc, err := net.Dial("tcp", string(endpoint))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return nc
}

func frames(hs ...wire.Header) []byte {
	b := make([]byte, len(hs)*wire.HeaderSize)
	for i := range hs {
		hs[i].Encode(b[i*wire.HeaderSize:])
	}
	return b
}

// readAnswers reads n plain response frames (with their payloads) from
// nc within 20 s.
func readAnswers(t *testing.T, nc net.Conn, n int) []wire.Header {
	t.Helper()
	nc.SetReadDeadline(time.Now().Add(20 * time.Second))
	defer nc.SetReadDeadline(time.Time{})
	var hs []wire.Header
	for len(hs) < n {
		var hb [wire.HeaderSize]byte
		if _, err := io.ReadFull(nc, hb[:]); err != nil {
			t.Fatalf("answer %d of %d: %v", len(hs)+1, n, err)
		}
		var h wire.Header
		if err := h.Decode(hb[:]); err != nil {
			t.Fatal(err)
		}
		if h.Op == wire.OpGroup {
			t.Fatal("the target answered with a group")
		}
		if _, err := io.CopyN(io.Discard, nc, int64(h.Carries())); err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
	}
	return hs
}

// TestGroupWithAWriteOfNoBytes: a group whose WRITEs include one of
// length 0 between two that carry bytes is served, each acknowledged,
// the bytes in place; the empty one once made the target read the
// others' payloads with an iovec pointing at an empty slice's first byte
// (a panic: the process, the host of an in-process transport, died).
func TestGroupWithAWriteOfNoBytes(t *testing.T) {
	b := transporttest.NewNode(t, inproc(``), "b")
	dst := b.Alloc(t, 1<<20, 0)
	const size = 64 << 10
	payload := make([]byte, 2*size)
	for i := range payload {
		payload[i] = byte(i*31 + i>>9)
	}
	reqs := []wire.Header{
		{Op: wire.OpWrite, ReqID: 1, Region: uint64(dst.ID), Offset: 0, Length: size},
		{Op: wire.OpWrite, ReqID: 2, Region: uint64(dst.ID), Offset: 3 * size, Length: 0},
		{Op: wire.OpWrite, ReqID: 3, Region: uint64(dst.ID), Offset: size, Length: size, Status: wire.FlagFlush},
	}
	msg := frames(wire.GroupHeader(len(reqs)))
	msg = append(msg, frames(reqs...)...)
	msg = append(msg, payload...)
	nc := rawInitiator(t, b.Endpoint)
	if _, err := nc.Write(msg); err != nil {
		t.Fatal(err)
	}
	for i, h := range readAnswers(t, nc, len(reqs)) {
		if h.Op != wire.OpWriteAck || h.ReqID != reqs[i].ReqID || h.Status != wire.StatusOK {
			t.Fatalf("answer %d: %s for request %d, status %s; want WRITE_ACK for %d, ok", i, h.Op, h.ReqID, h.Status, reqs[i].ReqID)
		}
	}
	if !bytes.Equal(dst.Bytes[:2*size], payload) {
		t.Fatal("the group's payloads did not land in place")
	}
}

// TestReadAnswersHoldNoRegionWhileTheInitiatorIsSilent: the answer to a
// READ is sent before the target waits for the next request, even when
// the READ did not ask for a flush: a peer that then says nothing more
// does not hold the region, and its deregistration completes.
func TestReadAnswersHoldNoRegionWhileTheInitiatorIsSilent(t *testing.T) {
	b := transporttest.NewNode(t, inproc(``), "b")
	src := b.Alloc(t, 1<<20, 0)
	nc := rawInitiator(t, b.Endpoint)
	if _, err := nc.Write(frames(wire.Header{Op: wire.OpRead, ReqID: 1, Region: uint64(src.ID), Length: 64 << 10})); err != nil {
		t.Fatal(err)
	}
	h := readAnswers(t, nc, 1)[0]
	if h.Op != wire.OpReadResp || h.Status != wire.StatusOK {
		t.Fatalf("answer: %s, status %s", h.Op, h.Status)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := b.T.DeregisterRegion(ctx, src.ID); err != nil {
		t.Fatalf("deregistering the region a silent peer read: %v", err)
	}
}

// TestAnInitiatorThatStopsReadingHoldsNoRegion: READ answers larger than
// the socket's buffers, to an initiator that never reads them (stopped,
// wedged), end the connection after op_timeout, and the region they come
// from can be deregistered; without the bound the target's write waited
// as long as the connection lived, holding the region.
func TestAnInitiatorThatStopsReadingHoldsNoRegion(t *testing.T) {
	b := transporttest.NewNode(t, inproc(`{"op_timeout":"300ms"}`), "b")
	const chunk, n = 1 << 20, 64
	src := b.Alloc(t, chunk*n, 0)
	reqs := make([]wire.Header, n)
	for i := range reqs {
		reqs[i] = wire.Header{Op: wire.OpRead, ReqID: uint64(i + 1), Region: uint64(src.ID), Offset: uint64(i * chunk), Length: chunk}
	}
	reqs[n-1].Status = wire.FlagFlush
	nc := rawInitiator(t, b.Endpoint)
	if _, err := nc.Write(frames(reqs...)); err != nil {
		t.Fatal(err)
	}
	// The first answer's header says the target serves the READs; the
	// rest fill the sockets' buffers (a few MiB) and the target's write
	// waits: the deregistration can only end once it gives up.
	var hb [wire.HeaderSize]byte
	nc.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.ReadFull(nc, hb[:]); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := b.T.DeregisterRegion(ctx, src.ID); err != nil {
		t.Fatalf("deregistering the region an initiator that stopped reading read: %v", err)
	}
}
