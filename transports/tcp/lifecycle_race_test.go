package tcp_test

import (
	"context"
	"errors"
	"io"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/kvconnect/kvconnect/auth"
	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/plugins/transporttest"
	"github.com/kvconnect/kvconnect/transports/tcp"
)

// TestRegisterRegionWhileInitRuns: a registration that passes the
// transport's guard the moment Init marks it up reads the options Init
// set (the race detector fails this test when Init sets them after).
func TestRegisterRegionWhileInitRuns(t *testing.T) {
	ctx := context.Background()
	tr := tcp.New()
	defer tr.Close(ctx)
	mem := make([]byte, 4096)
	initDone := make(chan error, 1)
	go func() {
		_, err := tr.Init(ctx, plugins.InitRequest{Hostname: "127.0.0.1"})
		initDone <- err
	}()
	for {
		_, err := tr.RegisterRegion(ctx, plugins.Region{ID: 1, Addr: uint64(uintptr(unsafe.Pointer(&mem[0]))), Mem: mem})
		if err == nil {
			break
		}
		if !errors.Is(err, plugins.ErrNotInitialized) {
			t.Fatalf("RegisterRegion while Init runs: %v, want nil or ErrNotInitialized", err)
		}
		runtime.Gosched()
	}
	if err := <-initDone; err != nil {
		t.Fatal(err)
	}
}

// TestMooncakeTransferMeetingClose: ops of a batch to a Mooncake peer
// that Close overtakes fail with ErrClosed (or succeed), never with the
// unknown region Close's emptying of the region table would otherwise
// give them. Close is started at varying points of a large batch; the
// window is small, so it is tried several times.
func TestMooncakeTransferMeetingClose(t *testing.T) {
	for round := 0; round < 12; round++ {
		h := inproc(``)
		h.PeerEndpoint = mooncakeEndpoint(t, 2)
		a := transporttest.NewNode(t, h, "a")
		b := transporttest.NewNode(t, h, "b")
		const n = 16384
		src := a.Alloc(t, n*64, 0)
		dst := b.Alloc(t, n*64, 0)
		peer := a.Connect(t, b)
		ops := make([]plugins.Op, n)
		for i := range ops {
			ops[i] = plugins.Op{Kind: plugins.OpWrite, LocalRegion: src.ID, LocalOffset: uint64(i * 64), RemoteRegion: dst.ID, RemoteOffset: uint64(i * 64), Length: 64}
		}
		res := make([]plugins.OpResult, n)
		started, done := make(chan struct{}), make(chan error, 1)
		go func() {
			close(started)
			done <- a.T.Transfer(context.Background(), peer, ops, res)
		}()
		<-started
		for i := 0; i < round*40; i++ {
			runtime.Gosched()
		}
		if err := a.T.Close(context.Background()); err != nil {
			t.Fatalf("round %d: Close: %v", round, err)
		}
		<-done
		for i, r := range res {
			if r.Err != nil && !errors.Is(r.Err, plugins.ErrClosed) {
				t.Fatalf("round %d: op %d: %v, want nil or ErrClosed", round, i, r.Err)
			}
		}
	}
}

// TestCloseCutsARedialShort: Close of a transport whose peer is being
// redialed (the connection broke; the new one's authentication gets no
// answer) ends that dial: the op waiting for it fails with ErrClosed,
// not with the authentication's timeout 5 s later.
func TestCloseCutsARedialShort(t *testing.T) {
	k, err := auth.NewKeyring("redial-secret-0123456789abcdef")
	if err != nil {
		t.Fatal(err)
	}
	h := transporttest.Harness{New: transporttest.InProcess(func() plugins.Transport { return tcp.New() }), Auth: k,
		Options: []byte(`{"connections":1}`)}
	a := transporttest.NewNode(t, h, "a")
	b := transporttest.NewNode(t, h, "b")
	src := a.Alloc(t, 4096, 0)
	dst := b.Alloc(t, 4096, 0)
	info := b.Info()
	target := string(info.Endpoint)
	// A proxy in front of b: it relays the first connection, and holds
	// later ones without a word once stalled.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var mu sync.Mutex
	var stalled bool
	var held []net.Conn
	accepted := make(chan struct{}, 16)
	defer func() {
		mu.Lock()
		for _, c := range held {
			c.Close()
		}
		mu.Unlock()
	}()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			st := stalled
			mu.Unlock()
			if st {
				accepted <- struct{}{}
				continue
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			held = append(held, s)
			mu.Unlock()
			go func() { io.Copy(s, c); s.Close() }()
			go func() { io.Copy(c, s); c.Close() }()
		}
	}()
	info.Endpoint = []byte(ln.Addr().String())
	ctx := context.Background()
	peer, err := a.T.Connect(ctx, info)
	if err != nil {
		t.Fatal(err)
	}
	ops := []plugins.Op{{Kind: plugins.OpWrite, LocalRegion: src.ID, RemoteRegion: dst.ID, Length: 4096}}
	a.MustTransfer(t, peer, ops)
	mu.Lock()
	stalled = true
	for _, c := range held {
		c.Close() // the relayed connection breaks
	}
	held = held[:0]
	mu.Unlock()
	last := make(chan error, 1)
	go func() {
		res := make([]plugins.OpResult, 1)
		for {
			a.T.Transfer(ctx, peer, ops, res)
			// An op that found the break itself fails as unreachable (or,
			// dialing too soon after it, fails fast); the next one redials.
			if err := res[0].Err; err == nil || !errors.Is(err, plugins.ErrPeerUnreachable) {
				last <- err
				return
			}
		}
	}()
	select {
	case <-accepted: // the redial is waiting for the proxy's answer
	case err := <-last:
		t.Fatalf("the op ended before any redial reached the proxy: %v", err)
	case <-time.After(2 * time.Minute):
		t.Fatal("no redial reached the proxy in 2 minutes")
	}
	if err := a.T.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := <-last; !errors.Is(err, plugins.ErrClosed) {
		t.Errorf("the op waiting for a redial cut short by Close: %v, want ErrClosed", err)
	}
}
