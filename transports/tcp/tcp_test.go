package tcp_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/plugins/transporttest"
	"github.com/kvconnect/kvconnect/transports/tcp"
	"github.com/kvconnect/kvconnect/transports/tcp/internal/wire"
)

func inproc(opts string) transporttest.Harness {
	return transporttest.Harness{New: func(*testing.T) plugins.Transport { return tcp.New() }, Options: []byte(opts)}
}

// TestDeadPeerTimesOut connects to a peer that accepts and reads but never
// answers (a wedged host): ops fail with ErrTimeout after op_timeout.
func TestDeadPeerTimesOut(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var held []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, nc)
			mu.Unlock()
			go io.Copy(io.Discard, nc)
		}
	}()
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		for _, nc := range held {
			nc.Close()
		}
	}()
	a := transporttest.NewNode(t, inproc(`{"op_timeout":"200ms","connections":2}`), "a")
	src := a.Alloc(t, 1<<20, 0)
	peer, err := a.T.Connect(context.Background(), plugins.PeerInfo{Name: "wedged", Endpoint: []byte(ln.Addr().String())})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	res, _ := a.Transfer(t, peer, []plugins.Op{
		{Kind: plugins.OpWrite, LocalRegion: src.ID, RemoteRegion: 1, Length: 1 << 20},
		{Kind: plugins.OpRead, LocalRegion: src.ID, RemoteRegion: 1, Length: 4096},
	})
	took := time.Since(start)
	for i, r := range res {
		if !errors.Is(r.Err, plugins.ErrTimeout) {
			t.Errorf("op %d: %v, want ErrTimeout", i, r.Err)
		}
	}
	// Not before op_timeout; after it, as soon as the machine gets to it
	// (the bound only tells a hang: the wedged peer never answers).
	if took < 150*time.Millisecond || took > 200*time.Millisecond+10*time.Second {
		t.Errorf("ops failed after %v; want about op_timeout (200ms)", took)
	}
	if !strings.Contains(res[0].Err.Error(), "op_timeout") {
		t.Errorf("error %q does not name the setting", res[0].Err)
	}
}

// TestMalformedRequestDropsOnlyThatConnection sends garbage to a node's
// data port: that connection is dropped and the node keeps serving.
func TestMalformedRequestDropsOnlyThatConnection(t *testing.T) {
	h := inproc("")
	a, b := transporttest.NewNode(t, h, "a"), transporttest.NewNode(t, h, "b")
	src, dst := a.Alloc(t, 4096, 0), b.Alloc(t, 4096, 0)
	before := bytes.Clone(dst.Bytes)
	for _, junk := range [][]byte{
		bytes.Repeat([]byte{0xff}, wire.HeaderSize),
		func() []byte { // a response op sent as a request
			var hb [wire.HeaderSize]byte
			(&wire.Header{Op: wire.OpWriteAck, Region: uint64(dst.ID)}).Encode(hb[:])
			return hb[:]
		}(),
		func() []byte { // a write claiming more than MaxLength
			var hb [wire.HeaderSize]byte
			(&wire.Header{Op: wire.OpWrite, Region: uint64(dst.ID)}).Encode(hb[:])
			binary.LittleEndian.PutUint64(hb[32:], wire.MaxLength+1)
			return hb[:]
		}(),
	} {
		nc, err := net.Dial("tcp", string(b.Endpoint))
		if err != nil {
			t.Fatal(err)
		}
		nc.Write(junk)
		nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		got, err := io.ReadAll(nc)
		// Bytes that are not kvconnect's framing are read as a Mooncake
		// request: a v2 one at a bad address gets Mooncake's "rejected"
		// status, then the close (a reset, with our unread bytes left).
		rejected := len(got) == 8 && binary.LittleEndian.Uint64(got) == 0x4D43545600000001
		if (err != nil && !rejected) || (len(got) != 0 && !rejected) {
			t.Errorf("node answered % x (%v) to a malformed request instead of dropping the connection", got, err)
		}
		nc.Close()
	}
	if !bytes.Equal(dst.Bytes, before) {
		t.Fatal("malformed requests changed region memory")
	}
	peer := a.Connect(t, b)
	transporttest.Fill(src.Bytes, 1)
	a.MustTransfer(t, peer, []plugins.Op{{Kind: plugins.OpWrite, LocalRegion: src.ID, RemoteRegion: dst.ID, Length: 4096}})
	if !bytes.Equal(dst.Bytes, src.Bytes) {
		t.Fatal("the node does not serve after malformed requests")
	}
}

// fakeTarget answers every request with a response built by answer.
func fakeTarget(t *testing.T, answer func(req wire.Header) wire.Header) string {
	addr, _ := scriptedTarget(t, func(_, _ int, nc net.Conn, h wire.Header) {
		var hb [wire.HeaderSize]byte
		resp := answer(h)
		resp.Encode(hb[:])
		nc.Write(hb[:])
	})
	return addr
}

// scriptedTarget accepts connections and hands each request to serve
// (with the connection's number, from 1, and the request's number on
// it, from 1) after reading its payload; serve answers (or not) on nc.
// It returns the address and the count of connections accepted.
func scriptedTarget(t *testing.T, serve func(conn, req int, nc net.Conn, h wire.Header)) (string, *atomic.Int32) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var accepted atomic.Int32
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			n := int(accepted.Add(1))
			go func() {
				defer nc.Close()
				var hb [wire.HeaderSize]byte
				for req := 1; ; req++ {
					if _, err := io.ReadFull(nc, hb[:]); err != nil {
						return
					}
					var h wire.Header
					if h.Decode(hb[:]) != nil {
						return
					}
					if h.Op == wire.OpWrite {
						io.CopyN(io.Discard, nc, int64(h.Length))
					}
					serve(n, req, nc, h)
				}
			}()
		}
	}()
	return ln.Addr().String(), &accepted
}

func ack(nc net.Conn, h wire.Header) {
	var hb [wire.HeaderSize]byte
	resp := wire.Header{Op: wire.OpWriteAck, ReqID: h.ReqID}
	resp.Encode(hb[:])
	nc.Write(hb[:])
}

// TestProtocolViolationsFailOps: responses that do not match the request
// fail the op with ErrProtocol instead of corrupting memory or hanging.
func TestProtocolViolationsFailOps(t *testing.T) {
	tests := []struct {
		name   string
		answer func(wire.Header) wire.Header
	}{
		{"wrong request id", func(h wire.Header) wire.Header { return wire.Header{Op: wire.OpWriteAck, ReqID: h.ReqID + 7} }},
		{"wrong op", func(h wire.Header) wire.Header { return wire.Header{Op: wire.OpReadResp, ReqID: h.ReqID} }},
		{"payload with error", func(h wire.Header) wire.Header {
			return wire.Header{Op: wire.OpWriteAck, ReqID: h.ReqID, Status: wire.StatusOutOfBounds, Length: 5}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr := fakeTarget(t, tt.answer)
			a := transporttest.NewNode(t, inproc(`{"connections":1}`), "a")
			src := a.Alloc(t, 4096, 0)
			peer, err := a.T.Connect(context.Background(), plugins.PeerInfo{Name: "liar", Endpoint: []byte(addr)})
			if err != nil {
				t.Fatal(err)
			}
			res, _ := a.Transfer(t, peer, []plugins.Op{{Kind: plugins.OpWrite, LocalRegion: src.ID, RemoteRegion: 1, Length: 100}})
			if !errors.Is(res[0].Err, plugins.ErrProtocol) {
				t.Fatalf("got %v, want ErrProtocol", res[0].Err)
			}
		})
	}
}

// TestReconnectAfterBrokenConnection cuts every connection between two
// nodes (through a proxy); the next batch redials and succeeds.
func TestReconnectAfterBrokenConnection(t *testing.T) {
	h := inproc(`{"connections":2}`)
	a, b := transporttest.NewNode(t, h, "a"), transporttest.NewNode(t, h, "b")
	src, dst := a.Alloc(t, 1<<20, 0), b.Alloc(t, 1<<20, 0)
	proxy := newCutProxy(t, string(b.Endpoint))
	peer, err := a.T.Connect(context.Background(), plugins.PeerInfo{Name: "b", Endpoint: []byte(proxy.addr())})
	if err != nil {
		t.Fatal(err)
	}
	op := []plugins.Op{{Kind: plugins.OpWrite, LocalRegion: src.ID, RemoteRegion: dst.ID, Length: 1 << 20}}
	a.MustTransfer(t, peer, op)
	proxy.cut()
	// The first batch after the cut may fail (its connections are dead);
	// within a few tries the transport must have redialed.
	var last error
	for i := 0; i < 5; i++ {
		res, _ := a.Transfer(t, peer, op)
		if last = res[0].Err; last == nil {
			break
		}
		if !errors.Is(last, plugins.ErrPeerUnreachable) {
			t.Fatalf("after the cut: %v, want ErrPeerUnreachable", last)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if last != nil {
		t.Fatalf("no batch succeeded after the connections were cut: %v", last)
	}
	if proxy.accepted() < 3 {
		t.Fatalf("proxy saw %d connections; want the 2 originals and at least one redial", proxy.accepted())
	}
}

type cutProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
	n      int
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	return newRelayProxy(t, target, func(dst, src net.Conn, _ bool) { io.Copy(dst, src) })
}

// newRelayProxy is a cutProxy whose connections copy with relay: from
// the dialer to target (toTarget set) and back, each direction until
// relay returns, which closes dst.
func newRelayProxy(t *testing.T, target string, relay func(dst, src net.Conn, toTarget bool)) *cutProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target}
	t.Cleanup(func() { ln.Close(); p.cut() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.n++
			p.mu.Unlock()
			go func() { relay(s, c, true); s.Close() }()
			go func() { relay(c, s, false); c.Close() }()
		}
	}()
	return p
}

func (p *cutProxy) addr() string { return p.ln.Addr().String() }

func (p *cutProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

func (p *cutProxy) accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}

func TestOptionErrors(t *testing.T) {
	tests := []struct {
		opts string
		want string
	}{
		{`{"connections":0}`, "transports.tcp.connections"},
		{`{"conections":4}`, `did you mean "connections"`},
		{`{"chunk_size":"huge"}`, "transports.tcp.chunk_size"},
		{`{"chunk_size":"1KiB"}`, "between 4KiB and 256MiB"},
		{`{"op_timeout":"soon"}`, "transports.tcp.op_timeout"},
		{`{"port":70000}`, "transports.tcp.port"},
		{`[1,2]`, "must be a JSON object"},
	}
	for _, tt := range tests {
		tr := tcp.New()
		_, err := tr.Init(context.Background(), plugins.InitRequest{Options: []byte(tt.opts)})
		var ie *plugins.InitError
		if !errors.Is(err, plugins.ErrInvalidArgument) || !errors.As(err, &ie) || ie.Step != plugins.StepConfigure || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("options %s: got %v, want a configure error mentioning %q", tt.opts, err, tt.want)
		}
		tr.Close(context.Background())
	}
}

func TestBindError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	tr := tcp.New()
	defer tr.Close(context.Background())
	_, err = tr.Init(context.Background(), plugins.InitRequest{Options: []byte(`{"bind_address":"127.0.0.1","port":` + strconv.Itoa(port) + `}`)})
	var ie *plugins.InitError
	if !errors.As(err, &ie) || ie.Step != plugins.StepBind || !errors.Is(err, plugins.ErrUnavailable) || len(ie.Hints) == 0 {
		t.Fatalf("binding a taken port: %v, want an unavailable bind diagnosis with hints", err)
	}
}

// TestCloseDuringInit races Close with Init: Init either succeeds (and
// Close then stops it) or fails with ErrClosed, and either way the
// listener Init bound is closed once both have returned. The delay before
// Close follows the boundary between "Close first" and "Init first", so
// many rounds land while Init runs.
func TestCloseDuringInit(t *testing.T) {
	var delay time.Duration
	during := 0
	for i := 0; i < 200; i++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		tr := tcp.New()
		done := make(chan error, 1)
		go func() {
			_, err := tr.Init(context.Background(), plugins.InitRequest{Options: []byte(`{"bind_address":"127.0.0.1","port":` + strconv.Itoa(port) + `}`)})
			done <- err
		}()
		for until := time.Now().Add(delay); time.Now().Before(until); { // sleeps are too coarse
		}
		if err := tr.Close(context.Background()); err != nil {
			t.Fatalf("Close: %v", err)
		}
		err = <-done
		switch {
		case err == nil:
			delay -= 500 * time.Nanosecond
		case errors.Is(err, plugins.ErrClosed) && strings.Contains(err.Error(), "Init after Close"):
			delay += 500 * time.Nanosecond
		case errors.Is(err, plugins.ErrClosed):
			during++
		case errors.As(err, new(*plugins.InitError)) && strings.Contains(err.Error(), "address already in use"):
			continue // another process took the port
		default:
			t.Fatalf("Init racing Close: %v, want success or ErrClosed", err)
		}
		delay = max(delay, 0)
		ln, err = net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("the listener Init bound is still open after Init and Close returned: %v", err)
		}
		ln.Close()
	}
	t.Logf("Close came while Init ran in %d of 200 rounds", during)
}

// TestConcurrentRedialsShareOneConnection breaks the only connection to a
// healthy peer, then runs batches from many goroutines at once: they must
// all succeed (no redial may close a connection another batch is using).
func TestConcurrentRedialsShareOneConnection(t *testing.T) {
	h := inproc(`{"connections":1}`)
	a, b := transporttest.NewNode(t, h, "a"), transporttest.NewNode(t, h, "b")
	src, dst := a.Alloc(t, 1<<20, 0), b.Alloc(t, 1<<20, 0)
	proxy := newCutProxy(t, string(b.Endpoint))
	peer, err := a.T.Connect(context.Background(), plugins.PeerInfo{Name: "b", Endpoint: []byte(proxy.addr())})
	if err != nil {
		t.Fatal(err)
	}
	op := []plugins.Op{{Kind: plugins.OpWrite, LocalRegion: src.ID, RemoteRegion: dst.ID, Length: 64 << 10}}
	for round := 0; round < 20; round++ {
		a.MustTransfer(t, peer, op) // the connection works
		proxy.cut()
		// Let the reader notice the cut, so the next batches find the slot broken.
		time.Sleep(5 * time.Millisecond)
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for g := 0; g < 8; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, _ := a.Transfer(t, peer, op)
				if res[0].Err != nil && !errors.Is(res[0].Err, plugins.ErrPeerUnreachable) {
					errs <- res[0].Err
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("round %d: a batch to a healthy peer failed with %v", round, err)
		}
	}
}

// TestPeerStallingMidWriteReleasesRegion: a peer that sends a WRITE header
// and part of its payload, then nothing, must not hold the region: after
// op_timeout the target drops the connection and Deregister completes.
func TestPeerStallingMidWriteReleasesRegion(t *testing.T) {
	b := transporttest.NewNode(t, inproc(`{"op_timeout":"300ms"}`), "b")
	dst := b.Alloc(t, 1<<20, 0)
	nc, err := net.Dial("tcp", string(b.Endpoint))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	var hb [wire.HeaderSize]byte
	(&wire.Header{Op: wire.OpWrite, ReqID: 1, Region: uint64(dst.ID), Length: 1 << 20}).Encode(hb[:])
	nc.Write(hb[:])
	nc.Write(make([]byte, 100)) // then stall, connection open
	time.Sleep(50 * time.Millisecond)
	// The stalled write is dropped after op_timeout (300ms), which lets
	// Deregister finish; were it not, Deregister would wait for ever (the
	// peer neither sends nor closes) and fail when ctx ends.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	if err := b.T.DeregisterRegion(ctx, dst.ID); err != nil {
		t.Fatalf("Deregister while a peer stalls mid-write: %v", err)
	}
	t.Logf("Deregister returned after %v (op_timeout 300ms)", time.Since(start))
}
