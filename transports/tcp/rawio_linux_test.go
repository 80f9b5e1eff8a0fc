//go:build linux

package tcp

import (
	"bytes"
	"errors"
	"io"
	"os"
	"testing"
	"time"
)

// TestRawIO: raw reads and writes move what net.Conn's would, a writev
// larger than the socket's buffers waits in the poller and finishes
// across partial writes, a closed peer is io.EOF, and a deadline ends a
// wait.
func TestRawIO(t *testing.T) {
	a, b := tcpPair(t)
	ra, rb := newRawIO(a), newRawIO(b)
	if ra == nil || rb == nil {
		t.Fatal("no raw I/O on a TCP connection")
	}
	// Pieces, some empty, more than IOV_MAX of them, 8 MiB in all.
	var want []byte
	var bufs [][]byte
	for i := range 1500 {
		p := bytes.Repeat([]byte{byte(i)}, (i*5347)%11000)
		want = append(want, p...)
		bufs = append(bufs, p)
	}
	got := make(chan []byte, 1)
	go func() {
		buf := make([]byte, len(want))
		n, _ := io.ReadFull(rb, buf)
		got <- buf[:n]
	}()
	if err := ra.Writev(bufs); err != nil {
		t.Fatal(err)
	}
	if g := <-got; !bytes.Equal(g, want) {
		t.Fatalf("writev of %d bytes arrived as %d bytes, equal %v", len(want), len(g), bytes.Equal(g, want[:len(g)]))
	}

	if n, err := rb.Write([]byte("status")); n != 6 || err != nil {
		t.Fatalf("write: %d, %v", n, err)
	}
	p := make([]byte, 16)
	if n, err := ra.Read(p); err != nil || string(p[:n]) != "status" {
		t.Fatalf("read %q, %v", p[:n], err)
	}

	a.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	if _, err := ra.Read(p); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a read past its deadline: %v", err)
	}
	a.SetReadDeadline(time.Time{})
	b.Close()
	if _, err := ra.Read(p); err != io.EOF {
		t.Fatalf("a read after the peer closed: %v, want io.EOF", err)
	}
}
