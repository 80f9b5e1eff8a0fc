//go:build linux && cgo

package ucxpath

import (
	"context"
	"errors"
	"testing"
	"time"
	"unsafe"

	"github.com/kvconnect/kvconnect/internal/shm"
	ucxlib "github.com/kvconnect/kvconnect/internal/ucx"
	"github.com/kvconnect/kvconnect/plugins"
)

// TestCloseOvertakingADeregistrationUnmapsItsRegion: a deregistration
// still waiting for a peer's acknowledgement when Close comes, or one
// whose caller gave up, leaves no UCX memory registration behind once
// the transport closed. (With RDMA lanes such a registration keeps its
// memory pinned until the process exits.) The peer is a raw UCX client
// that never acknowledges.
func TestCloseOvertakingADeregistrationUnmapsItsRegion(t *testing.T) {
	for _, c := range []struct {
		name     string
		giveUp   bool // the deregistration's caller gives up before Close
		ackClose bool // the client acknowledges Close's revocation: the worker is destroyed, not left allocated
	}{
		{"waiting", false, true},
		{"given up", true, true},
		{"waiting, close unanswered", false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := ucxlib.Mapped()
			tr := New(Variant{Name: "ucx"})
			res, err := tr.Init(context.Background(), plugins.InitRequest{Hostname: "127.0.0.1", Options: []byte(`{"tls":"tcp","op_timeout":"60s"}`)})
			if err != nil {
				t.Fatal(err)
			}
			seg, err := shm.New("deregclose-test", 4096)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { seg.Close() }) // after the transport closed
			mem := seg.Bytes()
			if _, err := tr.RegisterRegion(context.Background(), plugins.Region{ID: 1, Addr: uint64(uintptr(unsafe.Pointer(&mem[0]))), Mem: mem, File: seg.File()}); err != nil {
				t.Fatal(err)
			}
			if got := ucxlib.Mapped() - before; got != 1 {
				t.Fatalf("%d registrations after registering a region, want 1", got)
			}

			cl := newRawClient(t, res.Endpoint, true)
			addr, _ := cl.w.Address()
			cl.send(message{typ: msgHello, client: 7, where: thisPlace(), worker: addr})
			if m, ok := cl.next(time.Minute); !ok || m.typ != msgWelcome {
				t.Fatalf("welcome: %+v (ok=%v)", m, ok)
			}

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- tr.DeregisterRegion(ctx, 1) }()
			if m, ok := cl.next(time.Minute); !ok || m.typ != msgRevoke {
				t.Fatalf("revoke: %+v (ok=%v)", m, ok)
			}
			// The deregistration waits for the client's acknowledgement,
			// which never comes.
			if c.giveUp {
				cancel()
				if err := <-done; !errors.Is(err, plugins.ErrCanceled) {
					t.Fatalf("deregistration given up: %v, want ErrCanceled", err)
				}
			}
			cctx, ccancel := context.WithTimeout(context.Background(), time.Second)
			defer ccancel()
			closed := make(chan struct{})
			go func() {
				defer close(closed)
				tr.Close(cctx) // gives up on the client's acknowledgement after 1s
			}()
			// The client reads what comes and answers only Close's revocation,
			// if at all. Unanswered, Close ends at its deadline with a send in
			// flight and leaves the UCX worker allocated.
			for waiting := true; waiting; {
				select {
				case <-closed:
					waiting = false
				default:
					if m, ok := cl.next(10 * time.Millisecond); ok && c.ackClose && m.typ == msgRevoke && m.reason == revokeClosing {
						cl.send(message{typ: msgAck, client: 7, seq: m.seq})
					}
				}
			}
			if !c.giveUp {
				if err := <-done; err == nil {
					t.Fatal("a deregistration Close overtook succeeded")
				}
			}
			if got := ucxlib.Mapped() - before; got != 0 {
				t.Fatalf("%d UCX memory registrations left after Close, want 0", got)
			}
		})
	}
}
