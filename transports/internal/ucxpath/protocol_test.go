//go:build linux && cgo

package ucxpath

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"github.com/kvconnect/kvconnect/internal/shm"
	ucxlib "github.com/kvconnect/kvconnect/internal/ucx"
	"github.com/kvconnect/kvconnect/plugins"
)

// rawClient is a UCX worker driven by hand, speaking the control protocol
// to a transport the way a misbehaving peer might.
type rawClient struct {
	t    *testing.T
	w    *ucxlib.Worker
	ep   ucxlib.EP
	buf  []byte
	slot uint32 // next slot: a slot must not be reused while in flight
}

func newRawClient(t *testing.T, target []byte, errHandling bool) *rawClient {
	runtime.LockOSThread()
	t.Cleanup(runtime.UnlockOSThread)
	w, err := ucxlib.NewWorker(ucxlib.Config{TLS: "tcp", Slots: 64})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Destroy)
	e, err := decodeEndpoint(target)
	if err != nil {
		t.Fatal(err)
	}
	ep, err := w.Connect(e.worker, errHandling)
	if err != nil {
		t.Fatal(err)
	}
	return &rawClient{t: t, w: w, ep: ep, buf: make([]byte, ucxlib.MaxMessage)}
}

func (c *rawClient) send(m message) { c.sendRaw(m.encode()) }

func (c *rawClient) sendRaw(b []byte) {
	c.slot++
	if st := c.w.SendMessage(c.slot, c.ep, b); st != ucxlib.OK && st != ucxlib.InProgress {
		c.t.Fatal(st.Error("send"))
	}
}

// next progresses until a message arrives, or returns false at the
// deadline.
func (c *rawClient) next(d time.Duration) (message, bool) {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		c.w.Progress(16)
		c.w.Completions(nil)
		if n, ok := c.w.NextMessage(c.buf); ok {
			m, err := decodeMessage(c.buf[:n])
			if err != nil {
				c.t.Fatal(err)
			}
			return m, true
		}
		time.Sleep(time.Millisecond)
	}
	return message{}, false
}

func TestRevokeProtocol(t *testing.T) {
	tr := New(Variant{Name: "ucx"})
	defer tr.Close(context.Background())
	res, err := tr.Init(context.Background(), plugins.InitRequest{Hostname: "127.0.0.1", Options: []byte(`{"tls":"tcp","op_timeout":"1s"}`)})
	if err != nil {
		t.Fatal(err)
	}
	register := func(id plugins.RegionID) uint64 {
		seg, err := shm.New("revoke-test", 4096)
		if err != nil {
			t.Fatal(err)
		}
		// Never unmapped before the transport closes: a revoke that times
		// out leaves the region registered.
		t.Cleanup(func() { seg.Close() })
		mem := seg.Bytes()
		key, err := tr.RegisterRegion(context.Background(), plugins.Region{ID: id, Addr: uint64(uintptr(unsafe.Pointer(&mem[0]))), Mem: mem, File: seg.File()})
		if err != nil {
			t.Fatal(err)
		}
		k, err := decodeRegionKey(key)
		if err != nil {
			t.Fatal(err)
		}
		return k.token
	}
	tok1, tok2 := register(1), register(2)

	c := newRawClient(t, res.Endpoint, false)
	addr, _ := c.w.Address()
	c.send(message{typ: msgHello, client: 42, where: thisPlace(), worker: addr})
	m, ok := c.next(time.Minute)
	if !ok || m.typ != msgWelcome || m.client != 42 || len(m.regions) != 2 ||
		m.regions[0] != (liveRegion{1, tok1}) || m.regions[1] != (liveRegion{2, tok2}) {
		t.Fatalf("welcome: %+v (ok=%v)", m, ok)
	}

	deregister := func(id plugins.RegionID) chan error {
		done := make(chan error, 1)
		go func() { done <- tr.DeregisterRegion(context.Background(), id) }()
		return done
	}

	// A client that never acknowledges: the deregistration times out and
	// the region stays registered.
	done := deregister(1)
	m, ok = c.next(time.Minute)
	if !ok || m.typ != msgRevoke || m.reason != revokeDeregistered || len(m.regions) != 1 || m.regions[0] != (liveRegion{1, tok1}) {
		t.Fatalf("revoke: %+v (ok=%v)", m, ok)
	}
	select {
	case err := <-done:
		if !errors.Is(err, plugins.ErrTimeout) {
			t.Fatalf("deregistration without acknowledgement: %v, want ErrTimeout", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("deregistration still waiting 10s after op_timeout")
	}

	// A client that acknowledges: the deregistration completes.
	done = deregister(2)
	m, ok = c.next(time.Minute)
	if !ok || m.typ != msgRevoke || m.regions[0].id != 2 {
		t.Fatalf("revoke: %+v", m)
	}
	select {
	case err := <-done:
		t.Fatalf("deregistration finished before the acknowledgement: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	c.send(message{typ: msgAck, client: 42, seq: m.seq})
	c.next(100 * time.Millisecond)
	if err := <-done; err != nil {
		t.Fatalf("acknowledged deregistration: %v", err)
	}

	// A client that said bye is not waited for.
	register(3)
	c.send(message{typ: msgBye, client: 42})
	c.next(100 * time.Millisecond)
	// Waited for, it would end in ErrTimeout after op_timeout (1s).
	if err := <-deregister(3); err != nil {
		t.Fatalf("deregistration after bye: %v", err)
	}

	// Garbage is dropped, and the transport still answers.
	c.sendRaw([]byte("not a kvconnect message"))
	c.send(message{typ: msgHello, client: 43, worker: addr})
	if m, ok := c.next(time.Minute); !ok || m.typ != msgWelcome || m.client != 43 {
		t.Fatalf("welcome after garbage: %+v (ok=%v)", m, ok)
	}
}
