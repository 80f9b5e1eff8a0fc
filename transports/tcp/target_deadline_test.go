package tcp

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// tcpPair is a connected loopback pair.
func tcpPair(t *testing.T) (a, b net.Conn) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	a, err = net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if b, err = l.Accept(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// TestPayloadDeadlineSpansRequests: arm sets a deadline once and moves it
// only when less than half its span is left.
func TestPayloadDeadlineSpansRequests(t *testing.T) {
	_, srv := tcpPair(t)
	var d payloadDeadline
	d.arm(srv, time.Hour)
	first := d.until
	if first.IsZero() {
		t.Fatal("arm set no deadline")
	}
	d.arm(srv, time.Hour)
	if d.until != first {
		t.Fatalf("arm moved a deadline an hour away: %v -> %v", first, d.until)
	}
	d.until = time.Now().Add(10 * time.Minute) // less than half the span left
	d.arm(srv, time.Hour)
	if d.until.Sub(first) < 0 || time.Until(d.until) < 50*time.Minute {
		t.Fatalf("arm kept a deadline with less than half its span left: %v", d.until)
	}
}

// TestPayloadDeadlineIdleHeaderReadsOn: a header read that meets the
// deadline (set for an earlier payload) clears it and reads on, keeping
// the bytes read before it: an idle connection is not an error.
func TestPayloadDeadlineIdleHeaderReadsOn(t *testing.T) {
	cli, srv := tcpPair(t)
	want := []byte("0123456789abcdef")
	if _, err := cli.Write(want[:5]); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(srv)
	var d payloadDeadline
	d.arm(srv, time.Nanosecond) // passed before the header's rest comes
	got := make([]byte, len(want))
	done := make(chan error, 1)
	go func() { done <- d.readHeader(srv, br, got) }()
	// The read meets the deadline once the first 5 bytes are consumed;
	// the rest arrives whenever.
	if _, err := cli.Write(want[5:]); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("readHeader: %v", err)
	}
	if string(got) != string(want) {
		t.Fatalf("header %q, want %q", got, want)
	}
	if !d.until.IsZero() {
		t.Fatal("the deadline is still recorded after a header read cleared it")
	}
}

// TestPayloadDeadlineFailsAStalledPayload: a payload that stops coming
// fails at the deadline instead of holding the region.
func TestPayloadDeadlineFailsAStalledPayload(t *testing.T) {
	cli, srv := tcpPair(t)
	if _, err := cli.Write([]byte("part")); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(srv)
	var d payloadDeadline
	d.arm(srv, 50*time.Millisecond)
	_, err := io.ReadFull(br, make([]byte, 64<<10))
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a stalled payload read ended with %v, want the deadline", err)
	}
}

func TestStateCheckRateLimits(t *testing.T) {
	var c stateCheck
	if !c.due() {
		t.Fatal("the first look is not due")
	}
	if c.due() {
		t.Fatal("a second look at once is due")
	}
	c.last = time.Now().Add(-2 * stateCheckEvery) // as after a SIGSTOP
	if !c.due() {
		t.Fatal("a look after the process stood still is not due")
	}
}
