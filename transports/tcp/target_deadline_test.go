package tcp

import (
	"errors"
	"net"
	"os"
	"testing"
	"time"
)

// tcpPair is a connected loopback pair.
func tcpPair(t testing.TB) (a, b net.Conn) {
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

// TestPayloadDeadlineSpansRequests: armRead and armWrite set a deadline
// once and move it only when less than half its span is left.
func TestPayloadDeadlineSpansRequests(t *testing.T) {
	_, srv := tcpPair(t)
	for _, c := range []struct {
		name  string
		arm   func(*connDeadlines)
		until func(*connDeadlines) *time.Time
	}{
		{"read", func(d *connDeadlines) { d.armRead(srv, time.Hour) }, func(d *connDeadlines) *time.Time { return &d.read }},
		{"write", func(d *connDeadlines) { d.armWrite(srv, time.Hour) }, func(d *connDeadlines) *time.Time { return &d.write }},
	} {
		var d connDeadlines
		c.arm(&d)
		first := *c.until(&d)
		if first.IsZero() {
			t.Fatalf("%s: arm set no deadline", c.name)
		}
		c.arm(&d)
		if *c.until(&d) != first {
			t.Fatalf("%s: arm moved a deadline an hour away: %v -> %v", c.name, first, *c.until(&d))
		}
		*c.until(&d) = time.Now().Add(10 * time.Minute) // less than half the span left
		c.arm(&d)
		if got := *c.until(&d); got.Before(first) || time.Until(got) < 50*time.Minute {
			t.Fatalf("%s: arm kept a deadline with less than half its span left: %v", c.name, got)
		}
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
	fr := newFrameReader(srv) // what the target reads requests with
	var d connDeadlines
	d.armRead(srv, time.Nanosecond) // passed before the header's rest comes
	got := make([]byte, len(want))
	done := make(chan error, 1)
	go func() { done <- d.readHeader(srv, fr, got) }()
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
	if !d.read.IsZero() {
		t.Fatal("the deadline is still recorded after a header read cleared it")
	}
}

// TestPayloadDeadlineFailsAStalledPayload: a payload that stops coming
// fails at the deadline instead of holding the region, small (read
// through the buffer) or large (read in place, with readv where there
// is one).
func TestPayloadDeadlineFailsAStalledPayload(t *testing.T) {
	for _, size := range []int{100, 64 << 10} {
		cli, srv := tcpPair(t)
		if _, err := cli.Write([]byte("part")); err != nil {
			t.Fatal(err)
		}
		fr := newFrameReader(srv)
		var d connDeadlines
		d.armRead(srv, 50*time.Millisecond)
		n, err := fr.payload(make([]byte, size))
		if !errors.Is(err, os.ErrDeadlineExceeded) || n != 4 {
			t.Fatalf("a stalled %d-byte payload read ended after %d bytes with %v, want 4 and the deadline", size, n, err)
		}
	}
}

func TestStateCheckRateLimits(t *testing.T) {
	var c stateCheck
	if !c.due(4096) {
		t.Fatal("the first look is not due")
	}
	if c.due(4096) {
		t.Fatal("a second look at once is due")
	}
	c.last = time.Now().Add(-2 * stateCheckEvery) // as after a SIGSTOP
	if !c.due(4096) {
		t.Fatal("a look after the process stood still is not due")
	}
	// Within the millisecond, the bytes applied since the last look bound
	// the next one: what a reset arriving meanwhile lets land.
	var applied uint64
	for c.last = time.Now().Add(time.Hour); !c.due(64 << 10); { // the clock never says due here
		applied += 64 << 10
		if applied > stateCheckBytes {
			t.Fatalf("%d bytes of WRITEs applied without a look, more than stateCheckBytes %d", applied, stateCheckBytes)
		}
	}
	if applied+64<<10 < stateCheckBytes {
		t.Fatalf("a look due after %d bytes, before stateCheckBytes %d", applied+64<<10, stateCheckBytes)
	}
}
