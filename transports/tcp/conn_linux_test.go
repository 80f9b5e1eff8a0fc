//go:build linux

package tcp_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"

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

// TestLoneOpGivenUpKeepsTheConnection: a lone small op whose caller gives
// up (its context ends) before the target answers fails with the
// context's error; the answer that comes later is read and dropped, and
// the next op runs over the same connection.
func TestLoneOpGivenUpKeepsTheConnection(t *testing.T) {
	got, release := make(chan struct{}), make(chan struct{})
	addr, accepted := scriptedTarget(t, func(conn, req int, nc net.Conn, h wire.Header) {
		if req == 1 {
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
	if n := accepted.Load(); n != 1 {
		t.Fatalf("the target accepted %d connections, want 1: giving up on an op does not break its connection", n)
	}
}
