package tcp

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/plugins/transporttest"
	"github.com/kvconnect/kvconnect/transports/tcp/internal/mcwire"
)

// TestMooncakeStalledRequestEndsAtOpTimeout: on a fresh connection (a
// Mooncake initiator's pool off: every request) a WRITE whose payload
// stops coming, and a READ whose answer the initiator stops taking, end
// at op_timeout: the target closes the connection (the WRITE counted
// failed) and lets go of the region (deregistering it, which waits for
// that, completes: transporttest's Free gives up after 10 s). The deadline is armed only once the read or the write
// has to wait, so this is what would break if that arming did not
// happen.
func TestMooncakeStalledRequestEndsAtOpTimeout(t *testing.T) {
	const size = 16 << 20 // more than the sockets hold in between
	for _, write := range []bool{true, false} {
		name := map[bool]string{true: "WRITE", false: "READ"}[write]
		t.Run(name, func(t *testing.T) {
			h := transporttest.Harness{New: func(*testing.T) plugins.Transport { return New() }, Options: []byte(`{"op_timeout":"200ms"}`)}
			b := transporttest.NewNode(t, h, "b")
			dst := b.Alloc(t, size, 0)
			d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
				var serr error
				if err := c.Control(func(fd uintptr) {
					serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
				}); err != nil {
					return err
				}
				return serr
			}}
			nc, err := d.Dial("tcp", string(b.Endpoint))
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			var hb [mcwire.HeaderSize]byte
			mcwire.Header{Size: size, Addr: dst.Addr, Write: write, V2: true}.Encode(&hb)
			req := hb[:]
			if write {
				req = append(req, make([]byte, 1000)...) // and no more of the payload
			}
			if _, err := nc.Write(req); err != nil {
				t.Fatal(err)
			}
			if !write {
				// The status word says the target is answering, holding the
				// region; then the initiator stops reading.
				var sb [mcwire.StatusSize]byte
				if _, err := io.ReadFull(nc, sb[:]); err != nil {
					t.Fatal(err)
				}
				if st := binary.LittleEndian.Uint64(sb[:]); st != mcwire.StatusOK {
					t.Fatalf("status of the READ: %#x, want ok", st)
				}
				b.Free(t, dst) // returns once the target has let go
			}
			nc.SetReadDeadline(time.Now().Add(10 * time.Second))
			n, err := io.Copy(io.Discard, nc)
			if errors.Is(err, syscall.ECONNRESET) {
				err = nil // closed with the rest of the payload unread
			}
			if err != nil {
				t.Fatalf("the target did not close the connection of a stalled %s: %v", name, err)
			}
			if !write && n >= size {
				t.Fatalf("a READ whose answer stalled got all %d bytes", n)
			}
			st, err := b.T.(plugins.StatsReporter).Stats(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if write {
				for _, s := range st.Ops {
					if s.Op == plugins.OpWrite && s.Result == plugins.ResultFailed && s.Ops == 1 {
						return
					}
				}
				t.Fatalf("the stalled WRITE is not counted failed: %+v", st.Ops)
			}
		})
	}
}
