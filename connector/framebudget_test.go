package connector

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/kvconnect/kvconnect/config"
)

// TestFrameBudgetClasses: requests may hold half of the pool and wait
// beyond it, first come first served; replies may use what requests
// leave; small requests always find their reserve; a wait that runs out
// is refused naming max_handshake_memory; nothing stays held.
func TestFrameBudgetClasses(t *testing.T) {
	const limit = 64 << 20
	b := newFrameBudget(limit)
	waits := make(chan frameClass, 4)
	b.onWait = func(c frameClass) { waits <- c }
	small, pool := int64(config.HandshakeSmallReserve), int64(limit-config.HandshakeSmallReserve)
	ctx := context.Background()
	if b.small != small || b.pool != pool || b.capOf(classRequest) != pool/2 {
		t.Fatalf("budget %+v", b.status())
	}
	if err := b.acquire(ctx, classRequest, pool/2); err != nil {
		t.Fatal(err)
	}
	// Requests are at their cap: the next waits, in order.
	first, second := make(chan error, 1), make(chan error, 1)
	go func() { first <- b.acquire(ctx, classRequest, frameChunk) }()
	<-waits
	go func() { second <- b.acquire(ctx, classRequest, frameChunk) }()
	<-waits
	// Replies still get the other half, and small requests their reserve.
	if err := b.acquire(ctx, classReply, pool/2); err != nil {
		t.Fatalf("a reply with requests at their cap: %v", err)
	}
	if !b.tryAcquire(classSmallRequest, small) {
		t.Fatal("a small request did not find its reserve")
	}
	if b.tryAcquire(classSmallRequest, 1) {
		t.Fatal("small requests went past their reserve")
	}
	if st := b.status(); st.InUse != limit || st.Peak != limit {
		t.Fatalf("in use %d, peak %d, want the limit %d", st.InUse, st.Peak, int64(limit))
	}
	// A reply that does not fit waits; one whose context ends is refused.
	short, cancel := context.WithCancel(ctx)
	cancel()
	err := b.acquire(short, classReply, frameChunk)
	<-waits
	if !errors.Is(err, ErrResourceExhausted) || !strings.Contains(err.Error(), "max_handshake_memory 64MiB") {
		t.Fatalf("a reply with no room: %v, want ErrResourceExhausted naming max_handshake_memory", err)
	}
	// Room given back goes to the waiting requests in order.
	b.release(classReply, frameChunk)
	b.release(classRequest, frameChunk)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-second:
		t.Fatalf("the second waiter went first or too: %v", err)
	default:
	}
	b.release(classRequest, frameChunk)
	if err := <-second; err != nil {
		t.Fatal(err)
	}
	// What can never fit is refused at once.
	if err := b.acquire(ctx, classRequest, pool/2+1); !errors.Is(err, ErrResourceExhausted) {
		t.Fatalf("a request larger than its class: %v", err)
	}
	b.release(classRequest, pool/2)
	b.release(classReply, pool/2-frameChunk)
	b.release(classSmallRequest, small)
	if st := b.status(); st.InUse != 0 || st.Waiting != 0 || st.Refused != 2 {
		t.Fatalf("after everything was released: %+v", st)
	}
}

// TestFrameBudgetReadsAsBytesArrive: a frame that announces 16 MiB and
// sends 1 MiB holds about 1 MiB, not 16; a small request takes the
// reserve; a frame that cannot get room in time is refused, releasing
// what it held.
func TestFrameBudgetReadsAsBytesArrive(t *testing.T) {
	b := newFrameBudget(config.DefaultMaxHandshakeMemory)
	var in bytes.Buffer
	hdr := frameHeader(16 << 20)
	hdr[8] = frameMetadata
	in.Write(hdr)
	in.Write(make([]byte, 1<<20))
	held, gone := make(chan int64, 1), make(chan struct{})
	r := readerFunc(func(p []byte) (int, error) {
		if in.Len() == 0 {
			held <- b.status().InUse
			<-gone // the peer sends nothing more, then goes away
			return 0, io.EOF
		}
		return in.Read(p)
	})
	done := make(chan error)
	go func() {
		_, err := b.readFrame(context.Background(), r, 16<<20, true)
		done <- err
	}()
	if got := <-held; got < 1<<20 || got > 1<<20+frameChunk {
		t.Fatalf("a frame that sent 1 MiB of 16 holds %d bytes", got)
	}
	close(gone)
	if err := <-done; !errors.Is(err, io.ErrUnexpectedEOF) || b.status().InUse != 0 {
		t.Fatalf("a frame cut short: %v, %d bytes still held", err, b.status().InUse)
	}

	var small bytes.Buffer
	writeFrame(&small, frameProbe, []byte(`{"kvconnect":{"version":1}}`))
	f, err := b.readFrame(context.Background(), &small, 16<<20, true)
	if err != nil || f.class != classSmallRequest {
		t.Fatalf("a small request: %v, class %v", err, f)
	}
	f.release()

	// Fill the requests' half, then a large request whose wait is over.
	if err := b.acquire(context.Background(), classRequest, b.capOf(classRequest)-(1<<20+frameChunk)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var big bytes.Buffer
	writeFrame(&big, frameNotify, make([]byte, 2<<20))
	if _, err := b.readFrame(ctx, &big, 16<<20, true); !errors.Is(err, ErrResourceExhausted) {
		t.Fatalf("a request with no room: %v", err)
	}
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }
