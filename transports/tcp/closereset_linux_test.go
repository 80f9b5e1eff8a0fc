//go:build linux

package tcp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/plugins/transporttest"
	"github.com/kvconnect/kvconnect/transports/tcp/internal/mcwire"
	"golang.org/x/sys/unix"
)

// TestMooncakeCloseIsAnsweredWithReset: a Mooncake peer that closes after
// its request (here a half-close, so the test can see what comes back)
// gets a reset, not a FIN, so no TIME-WAIT is left behind; with
// mooncake_reset_on_close false, a FIN (EOF).
func TestMooncakeCloseIsAnsweredWithReset(t *testing.T) {
	for _, reset := range []bool{true, false} {
		t.Run(fmt.Sprintf("mooncake_reset_on_close=%v", reset), func(t *testing.T) {
			h := transporttest.Harness{New: func(*testing.T) plugins.Transport { return New() },
				Options: fmt.Appendf(nil, `{"mooncake_reset_on_close":%v}`, reset)}
			b := transporttest.NewNode(t, h, "b")
			dst := b.Alloc(t, 4096, 0)
			nc, err := net.Dial("tcp", string(b.Endpoint))
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			var hb [mcwire.HeaderSize]byte
			mcwire.Header{Size: 4096, Addr: dst.Addr, Write: true, V2: true}.Encode(&hb)
			if _, err := nc.Write(append(hb[:], make([]byte, 4096)...)); err != nil {
				t.Fatal(err)
			}
			var sb [mcwire.StatusSize]byte
			if _, err := io.ReadFull(nc, sb[:]); err != nil {
				t.Fatal(err)
			}
			if err := nc.(*net.TCPConn).CloseWrite(); err != nil {
				t.Fatal(err)
			}
			nc.SetReadDeadline(time.Now().Add(10 * time.Second))
			n, err := nc.Read(make([]byte, 1))
			switch {
			case reset && !errors.Is(err, syscall.ECONNRESET):
				t.Fatalf("after the peer's close: read %d bytes, %v; want a reset", n, err)
			case !reset && !errors.Is(err, io.EOF):
				t.Fatalf("after the peer's close: read %d bytes, %v; want a FIN (EOF)", n, err)
			}
		})
	}
}

// TestMooncakeResetLosesNoAnswer: a peer that half-closes right after a
// READ, before reading the answer, still gets all of it: the reset comes
// only once the answer is acknowledged (its kernel holds it, readable
// before the reset), else the close is a FIN after it.
func TestMooncakeResetLosesNoAnswer(t *testing.T) {
	for _, size := range []int{4 << 10, 64 << 10, 4 << 20} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			b := transporttest.NewNode(t, transporttest.Harness{New: func(*testing.T) plugins.Transport { return New() }}, "b")
			src := b.Alloc(t, size, 0)
			transporttest.Fill(src.Bytes, uint64(size))
			nc, err := net.Dial("tcp", string(b.Endpoint))
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			var hb [mcwire.HeaderSize]byte
			mcwire.Header{Size: uint64(size), Addr: src.Addr, V2: true}.Encode(&hb)
			if _, err := nc.Write(hb[:]); err != nil {
				t.Fatal(err)
			}
			if err := nc.(*net.TCPConn).CloseWrite(); err != nil {
				t.Fatal(err)
			}
			if size <= 64<<10 {
				// The answer fits in the sockets: let the target send it and
				// answer the close before anything is read.
				waitClosedByTarget(t, nc)
			}
			got := make([]byte, mcwire.StatusSize+size)
			nc.SetReadDeadline(time.Now().Add(10 * time.Second))
			n, err := io.ReadFull(nc, got)
			if err != nil {
				t.Fatalf("read %d of the %d bytes of the answer: %v", n, len(got), err)
			}
			if st := binary.LittleEndian.Uint64(got); st != mcwire.StatusOK || !bytes.Equal(got[mcwire.StatusSize:], src.Bytes) {
				t.Fatalf("the answer is not the region's bytes (status %#x)", st)
			}
		})
	}
}

// waitClosedByTarget waits until the target's FIN or reset reached nc,
// which has half-closed: poll(2) reports POLLRDHUP (a FIN) or POLLHUP (a
// reset), not the answer's bytes arriving.
func waitClosedByTarget(t *testing.T, nc net.Conn) {
	t.Helper()
	var n int
	var perr error
	if err := rawConn(nc).Control(func(fd uintptr) {
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLRDHUP}}
		for {
			n, perr = unix.Poll(pfd, 10_000)
			if perr != unix.EINTR {
				return
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	if perr != nil || n == 0 {
		t.Fatalf("the target did not close within 10 s (poll: %d, %v)", n, perr)
	}
}
