//go:build linux

package tcp_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvconnect/kvconnect/internal/testbin"
	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/plugins/transporttest"
	"github.com/kvconnect/kvconnect/transports/tcp/internal/wire"
)

// TestIdleConnectionTheTargetSpoiledIsReplaced: no one reads an idle
// connection, so what its target did meanwhile (closed it, reset it, sent
// bytes nothing asked for) is found by the next op before it is sent:
// the op goes over a new connection and succeeds, for a lone small op
// (the caller reads its own response) and for a batch.
func TestIdleConnectionTheTargetSpoiledIsReplaced(t *testing.T) {
	for _, tc := range []struct {
		name  string
		spoil func(nc net.Conn)
	}{
		{"closed", func(nc net.Conn) { nc.Close() }},
		{"reset", func(nc net.Conn) { nc.(*net.TCPConn).SetLinger(0); nc.Close() }},
		{"unsolicited bytes", func(nc net.Conn) { nc.Write([]byte("surprise")) }},
	} {
		for _, length := range []uint64{4096, 1 << 20} {
			t.Run(tc.name+"/"+map[bool]string{true: "lone small op", false: "large op"}[length == 4096], func(t *testing.T) {
				first := make(chan net.Conn, 1)
				addr, accepted := scriptedTarget(t, func(conn, req int, nc net.Conn, h wire.Header) {
					if conn == 1 && req == 1 {
						first <- nc
					}
					ack(nc, h)
				})
				a := transporttest.NewNode(t, inproc(`{"connections":1}`), "a")
				src := a.Alloc(t, 1<<20, 0)
				peer, err := a.T.Connect(context.Background(), plugins.PeerInfo{Name: "spoiler", Endpoint: []byte(addr)})
				if err != nil {
					t.Fatal(err)
				}
				op := []plugins.Op{{Kind: plugins.OpWrite, LocalRegion: src.ID, RemoteRegion: 1, Length: length}}
				a.MustTransfer(t, peer, op)
				// The op is answered and its connection idle: spoil it.
				nc := <-first
				initiator, target := nc.RemoteAddr(), nc.LocalAddr()
				tc.spoil(nc)
				last := "not looked at"
				defer func() {
					if t.Failed() { // what the kernel showed last, for a failure that is rare
						t.Logf("the initiator's socket %v as /proc/net/tcp showed it last: %s; the target accepted %d connections", initiator, last, accepted.Load())
					}
				}()
				testbin.Eventually(t, "the initiator's socket to take in what its target did", func() bool {
					var seen bool
					seen, last = socketSees(t, initiator, target, tc.name == "unsolicited bytes")
					return seen
				})
				a.MustTransfer(t, peer, op)
				if n := accepted.Load(); n != 2 {
					t.Fatalf("the target accepted %d connections, want 2: the spoiled one and its replacement", n)
				}
			})
		}
	}
}

// socketSees reports whether the socket at local address addr connected
// to remote (the initiator's end, as the target sees it: its remote and
// local addresses) has taken in what the target did: it is no longer
// ESTABLISHED (a FIN or RST arrived), or, with unread set, it holds
// bytes nobody read. It reads /proc/net/tcp: the kernel's view, no
// timing involved. Both ends must match: on a busy host the same local
// port is often in TIME-WAIT from an earlier connection elsewhere
// (loopback reuses such ports at once). line is the socket's line there
// ("absent" when it is not).
func socketSees(t *testing.T, addr, remote net.Addr, unread bool) (seen bool, line string) {
	t.Helper()
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Skipf("cannot read /proc/net/tcp: %v", err)
	}
	local, peer := procNetAddr(addr), procNetAddr(remote)
	for _, line := range strings.Split(string(b), "\n")[1:] {
		// sl local_address rem_address st tx_queue:rx_queue ...
		fs := strings.Fields(line)
		if len(fs) < 5 || fs[1] != local || fs[2] != peer {
			continue
		}
		if unread {
			q := strings.SplitN(fs[4], ":", 2)
			return len(q) == 2 && strings.TrimLeft(q[1], "0") != "", line
		}
		return fs[3] != "01", line // TCP_ESTABLISHED
	}
	return !unread, "absent" // gone from the table: reset and unhashed
}

// procNetAddr is an IPv4 address as /proc/net/tcp writes it: the
// address's bytes in host order (little-endian here), then the port, hex.
func procNetAddr(addr net.Addr) string {
	ta := addr.(*net.TCPAddr)
	ip := ta.IP.To4()
	return fmt.Sprintf("%02X%02X%02X%02X:%04X", ip[3], ip[2], ip[1], ip[0], ta.Port)
}

// TestLoneOpGivenUpResetsItsConnection: a lone small op whose caller
// gives up (its context ends) before the target answers fails with the
// context's error, and its connection is reset, so that the request does
// not land later (a target that reads it after the reset drops it); the
// next op runs over a new connection.
func TestLoneOpGivenUpResetsItsConnection(t *testing.T) {
	got, release := make(chan struct{}), make(chan struct{})
	addr, accepted := scriptedTarget(t, func(conn, req int, nc net.Conn, h wire.Header) {
		if conn == 1 && req == 1 {
			close(got)
			<-release
		}
		ack(nc, h)
	})
	a := transporttest.NewNode(t, inproc(`{"connections":1}`), "a")
	src := a.Alloc(t, 4096, 0)
	peer, err := a.T.Connect(context.Background(), plugins.PeerInfo{Name: "slow", Endpoint: []byte(addr)})
	if err != nil {
		t.Fatal(err)
	}
	op := []plugins.Op{{Kind: plugins.OpWrite, LocalRegion: src.ID, RemoteRegion: 1, Length: 4096}}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-got; cancel() }()
	res := make([]plugins.OpResult, 1)
	if err := a.T.Transfer(ctx, peer, op, res); !errors.Is(err, plugins.ErrCanceled) || !errors.Is(res[0].Err, plugins.ErrCanceled) {
		t.Fatalf("an op given up: batch %v, op %v; want ErrCanceled", err, res[0].Err)
	}
	close(release)
	for i := 0; i < 3; i++ {
		a.MustTransfer(t, peer, op)
	}
	if n := accepted.Load(); n != 2 {
		t.Fatalf("the target accepted %d connections, want 2: the connection of the op given up is reset, the next op redials", n)
	}
}

// TestReadGivenUpMidAnswerTouchesNoMemoryAfter: a READ whose batch is
// given up (its context ends) while its answer is arriving (the target
// sent half the payload, then stalled) ends at once, not at op_timeout,
// and nothing of the answer reaches the local memory after Transfer
// returned: the connection is reset, so the rest is never read into it.
func TestReadGivenUpMidAnswerTouchesNoMemoryAfter(t *testing.T) {
	const size = 64 << 10
	release := make(chan struct{})
	addr, _ := scriptedTarget(t, func(conn, req int, nc net.Conn, h wire.Header) {
		if h.Op != wire.OpRead {
			ack(nc, h)
			return
		}
		var hb [wire.HeaderSize]byte
		(&wire.Header{Op: wire.OpReadResp, ReqID: h.ReqID, Length: h.Length}).Encode(hb[:])
		payload := bytes.Repeat([]byte{0xEE}, int(h.Length))
		nc.Write(hb[:])
		nc.Write(payload[:h.Length/2])
		<-release
		nc.Write(payload[h.Length/2:])
	})
	a := transporttest.NewNode(t, inproc(`{"connections":1,"op_timeout":"10m"}`), "a")
	dst := a.Alloc(t, size, 0)
	peer, err := a.T.Connect(context.Background(), plugins.PeerInfo{Name: "stalling", Endpoint: []byte(addr)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	res := make([]plugins.OpResult, 1)
	done := make(chan error, 1)
	go func() {
		done <- a.T.Transfer(ctx, peer, []plugins.Op{{Kind: plugins.OpRead, LocalRegion: dst.ID, RemoteRegion: 1, Length: size}}, res)
	}()
	select {
	case err := <-done:
		if !errors.Is(err, plugins.ErrTimeout) || !errors.Is(res[0].Err, plugins.ErrTimeout) {
			t.Fatalf("a READ given up mid-answer: batch %v, op %v; want ErrTimeout", err, res[0].Err)
		}
	case <-time.After(2 * time.Minute):
		close(release)
		t.Fatal("Transfer still running 2 minutes after its context ended (it waits for op_timeout)")
	}
	snapshot := append([]byte(nil), dst.Bytes...)
	close(release) // the target sends the rest of the answer
	// A later batch to the peer runs on a new connection: by its end, a
	// reader of the old one would have copied the rest.
	a.MustTransfer(t, peer, []plugins.Op{{Kind: plugins.OpWrite, LocalRegion: dst.ID, RemoteRegion: 1, Length: 4096}})
	if !bytes.Equal(dst.Bytes, snapshot) {
		t.Fatal("the answer of a READ given up reached the local memory after Transfer returned")
	}
}

// TestGroupsOfOneWithConcurrentLoneOps: a target that answers every
// request as a group (of one) while several callers send lone ops on one
// connection: a reader giving up the read side after a group must not
// share that group's scratch with the next reader (run with -race; a
// shared one completed chunks with another group's answers, or panicked).
func TestGroupsOfOneWithConcurrentLoneOps(t *testing.T) {
	addr, _ := scriptedTarget(t, func(conn, req int, nc net.Conn, h wire.Header) {
		var b [2 * wire.HeaderSize]byte
		g := wire.GroupHeader(1)
		g.Encode(b[:wire.HeaderSize])
		(&wire.Header{Op: wire.OpWriteAck, ReqID: h.ReqID}).Encode(b[wire.HeaderSize:])
		nc.Write(b[:])
	})
	a := transporttest.NewNode(t, inproc(`{"connections":1}`), "a")
	src := a.Alloc(t, 4096, 0)
	peer, err := a.T.Connect(context.Background(), plugins.PeerInfo{Name: "grouping", Endpoint: []byte(addr)})
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			for range 300 {
				res := make([]plugins.OpResult, 1)
				if err := a.T.Transfer(context.Background(), peer, []plugins.Op{{Kind: plugins.OpWrite, LocalRegion: src.ID, RemoteRegion: 1, Length: 512}}, res); err != nil || res[0].Err != nil {
					errs <- fmt.Errorf("%v / %v", err, res[0].Err)
					return
				}
			}
			errs <- nil
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// TestGivingUpOneBatchSaysRetryToTheOthers: batches sharing a connection
// with one that is given up fail with ErrCanceled when that connection is
// reset, not ErrPeerUnreachable: the peer is fine, and a caller (the
// connector) that took it for unreachable would drop it and every batch
// in flight to it.
func TestGivingUpOneBatchSaysRetryToTheOthers(t *testing.T) {
	got, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	addr, _ := scriptedTarget(t, func(conn, req int, nc net.Conn, h wire.Header) {
		once.Do(func() { close(got) })
		<-release // stalled: answers nothing until the test ends
	})
	defer close(release)
	a := transporttest.NewNode(t, inproc(`{"connections":1,"op_timeout":"10m"}`), "a")
	src := a.Alloc(t, 1<<20, 0)
	peer, err := a.T.Connect(context.Background(), plugins.PeerInfo{Name: "stalled", Endpoint: []byte(addr)})
	if err != nil {
		t.Fatal(err)
	}
	op := []plugins.Op{{Kind: plugins.OpWrite, LocalRegion: src.ID, RemoteRegion: 1, Length: 64 << 10}}
	other := make(chan []plugins.OpResult, 1)
	go func() {
		res := make([]plugins.OpResult, 1)
		a.T.Transfer(context.Background(), peer, op, res)
		other <- res
	}()
	<-got // the other batch's request is at the target
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res := make([]plugins.OpResult, 1)
	a.T.Transfer(ctx, peer, op, res) // given up at once: its request may be queued behind, or sent
	ctx, cancel = context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	a.T.Transfer(ctx, peer, op, make([]plugins.OpResult, 1)) // given up with its request sent: the connection is reset
	select {
	case r := <-other:
		if !errors.Is(r[0].Err, plugins.ErrCanceled) || errors.Is(r[0].Err, plugins.ErrPeerUnreachable) {
			t.Fatalf("a batch on a connection reset for another one: %v; want ErrCanceled, not ErrPeerUnreachable", r[0].Err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("the other batch still runs 2 minutes after its connection was reset")
	}
}
