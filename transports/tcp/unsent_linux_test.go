//go:build linux

package tcp

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/plugins/transporttest"
	"github.com/kvconnect/kvconnect/transports/tcp/internal/mcwire"
)

// TestMooncakeReadLimitsUnsent: a Mooncake connection that asks for a
// READ larger than mooncakeUnsent has its unsent bytes limited
// (TCP_NOTSENT_LOWAT) before the answer is written, and still gets the
// whole answer; WRITEs and small READs leave the socket as it was.
func TestMooncakeReadLimitsUnsent(t *testing.T) {
	for _, c := range []struct {
		write bool
		size  int
		limit bool
	}{
		{false, 1 << 20, true},
		{false, mooncakeUnsent + 1, true},
		{false, mooncakeUnsent, false},
		{false, 4 << 10, false},
		{true, 1 << 20, false},
	} {
		t.Run(fmt.Sprintf("write=%v/%d", c.write, c.size), func(t *testing.T) {
			b := transporttest.NewNode(t, transporttest.Harness{New: func(*testing.T) plugins.Transport { return New() }}, "b")
			reg := b.Alloc(t, c.size, 0)
			transporttest.Fill(reg.Bytes, uint64(c.size))
			nc, err := net.Dial("tcp", string(b.Endpoint))
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			nc.SetDeadline(time.Now().Add(30 * time.Second))
			var hb [mcwire.HeaderSize]byte
			mcwire.Header{Size: uint64(c.size), Addr: reg.Addr, Write: c.write, V2: true}.Encode(&hb)
			req := hb[:]
			if c.write {
				req = append(req, reg.Bytes...) // writes the region's own bytes back
			}
			if _, err := nc.Write(req); err != nil {
				t.Fatal(err)
			}
			// The status comes first (READ: before the data, after the
			// option is set; WRITE: once the payload is in memory).
			var sb [mcwire.StatusSize]byte
			if _, err := io.ReadFull(nc, sb[:]); err != nil {
				t.Fatal(err)
			}
			if st := binary.LittleEndian.Uint64(sb[:]); st != mcwire.StatusOK {
				t.Fatalf("status %#x", st)
			}
			// Unset, a socket has the system's default (-1 for the
			// accepted ones here: net.ipv4.tcp_notsent_lowat, "no limit").
			if got := serverNotsentLowat(t, nc); (got == mooncakeUnsent) != c.limit {
				t.Errorf("the target's socket has TCP_NOTSENT_LOWAT %d; want it limited to %d: %v", got, mooncakeUnsent, c.limit)
			}
			if !c.write {
				got := make([]byte, c.size)
				if _, err := io.ReadFull(nc, got); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, reg.Bytes) {
					t.Fatal("the answer is not the region's bytes")
				}
			}
		})
	}
}

// serverNotsentLowat finds, among this process's file descriptors, the
// socket at the other end of nc (the target's, served in this process)
// and returns its TCP_NOTSENT_LOWAT.
func serverNotsentLowat(t *testing.T, nc net.Conn) int {
	t.Helper()
	local := nc.LocalAddr().(*net.TCPAddr)
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		sa, err := unix.Getpeername(fd)
		if err != nil {
			continue
		}
		var ip net.IP
		var port int
		switch a := sa.(type) {
		case *unix.SockaddrInet4:
			ip, port = a.Addr[:], a.Port
		case *unix.SockaddrInet6: // a dual-stack listener's, ::ffff:127.0.0.1
			ip, port = a.Addr[:], a.Port
		}
		if port != local.Port || !ip.Equal(local.IP) {
			continue
		}
		v, err := unix.GetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NOTSENT_LOWAT)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	t.Fatalf("no socket of this process is connected to %s", local)
	return 0
}
