package transporttest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/kvconnect/kvconnect/plugins"
)

func runLifecycle(t *testing.T, h Harness) {
	t.Run("InfoBeforeInit", func(t *testing.T) { testInfoBeforeInit(t, h) })
	t.Run("CallsBeforeInit", func(t *testing.T) { testCallsBeforeInit(t, h) })
	t.Run("InitTwice", func(t *testing.T) { testInitTwice(t, h) })
	t.Run("InitAfterClose", func(t *testing.T) { testInitAfterClose(t, h) })
	t.Run("DuplicateAndOverlappingRegions", func(t *testing.T) { testDuplicateRegions(t, h) })
	t.Run("CloseDuringRegisterRegion", func(t *testing.T) { testCloseDuringRegister(t, h) })
}

func initReq(h Harness) plugins.InitRequest {
	return plugins.InitRequest{Hostname: h.Hostname, Metadata: "P2PHANDSHAKE", Options: h.Options, Auth: h.Auth}
}

func testInfoBeforeInit(t *testing.T, h Harness) {
	n := newNode(t, h, "node")
	info, err := n.T.Info(context.Background())
	if err != nil {
		t.Fatalf("Info before Init: %v", err)
	}
	if info.Name == "" || info.APIVersion != plugins.APIVersion {
		t.Fatalf("Info before Init = %+v, want a name and APIVersion %d", info, plugins.APIVersion)
	}
	if info.Capabilities&(plugins.CapRead|plugins.CapWrite) == 0 {
		t.Fatalf("Info reports neither CapRead nor CapWrite: %+v", info)
	}
}

func testCallsBeforeInit(t *testing.T, h Harness) {
	n := newNode(t, h, "node")
	ctx := context.Background()
	m := n.newMem(t, 4096, 0)
	defer m.seg.Close()
	if _, err := n.T.RegisterRegion(ctx, m.region()); !errors.Is(err, plugins.ErrNotInitialized) {
		t.Errorf("RegisterRegion before Init: %v, want ErrNotInitialized", err)
	}
	if _, err := n.T.Connect(ctx, plugins.PeerInfo{Name: "x", Endpoint: []byte("127.0.0.1:1")}); !errors.Is(err, plugins.ErrNotInitialized) {
		t.Errorf("Connect before Init: %v, want ErrNotInitialized", err)
	}
	if err := n.T.DeregisterRegion(ctx, 1); !errors.Is(err, plugins.ErrNotInitialized) {
		t.Errorf("DeregisterRegion before Init: %v, want ErrNotInitialized", err)
	}
	if err := n.T.Disconnect(ctx, 1); !errors.Is(err, plugins.ErrNotInitialized) {
		t.Errorf("Disconnect before Init: %v, want ErrNotInitialized", err)
	}
	res := make([]plugins.OpResult, 1)
	err := n.T.Transfer(ctx, 1, []plugins.Op{{Kind: plugins.OpWrite, LocalRegion: 1, RemoteRegion: 1, Length: 1}}, res)
	if !errors.Is(err, plugins.ErrNotInitialized) || !errors.Is(res[0].Err, plugins.ErrNotInitialized) {
		t.Errorf("Transfer before Init: %v / %v, want ErrNotInitialized", err, res[0].Err)
	}
}

func testInitTwice(t *testing.T, h Harness) {
	n := NewNode(t, h, "node")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := n.T.Init(ctx, initReq(h)); !errors.Is(err, plugins.ErrInvalidArgument) {
		t.Fatalf("second Init: %v, want ErrInvalidArgument", err)
	}
	// The first Init still holds: the node works.
	peer := NewNode(t, h, "peer")
	src := n.Alloc(t, 4096, 0)
	dst := peer.Alloc(t, 4096, 0)
	Fill(src.Bytes, 8)
	n.MustTransfer(t, n.Connect(t, peer), []plugins.Op{{Kind: plugins.OpWrite, LocalRegion: src.ID, RemoteRegion: dst.ID, Length: 4096}})
	equal(t, "WRITE after a refused second Init", dst.Bytes, src.Bytes)
}

func testInitAfterClose(t *testing.T, h Harness) {
	n := NewNode(t, h, "node")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := n.T.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := n.T.Close(ctx); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := n.T.Init(ctx, initReq(h)); !errors.Is(err, plugins.ErrClosed) {
		t.Fatalf("Init after Close: %v, want ErrClosed", err)
	}
	m := n.newMem(t, 4096, 0)
	defer m.seg.Close()
	if _, err := n.T.RegisterRegion(ctx, m.region()); !errors.Is(err, plugins.ErrClosed) {
		t.Fatalf("RegisterRegion after Close: %v, want ErrClosed", err)
	}
	if err := n.T.DeregisterRegion(ctx, m.ID); !errors.Is(err, plugins.ErrClosed) {
		t.Errorf("DeregisterRegion after Close: %v, want ErrClosed", err)
	}
	if err := n.T.Disconnect(ctx, 1); !errors.Is(err, plugins.ErrClosed) {
		t.Errorf("Disconnect after Close: %v, want ErrClosed", err)
	}
	if _, err := n.T.Info(ctx); err != nil {
		t.Fatalf("Info after Close: %v", err)
	}
}

func testDuplicateRegions(t *testing.T, h Harness) {
	n := NewNode(t, h, "node")
	ctx := context.Background()
	m := n.Alloc(t, 64<<10, 0)
	dup := *m
	dup.Key = nil
	if _, err := n.T.RegisterRegion(ctx, dup.region()); !errors.Is(err, plugins.ErrInvalidArgument) {
		t.Errorf("registering region %d twice: %v, want ErrInvalidArgument", m.ID, err)
	}
	// The same memory under another id overlaps it.
	over := n.newMem(t, 4096, 0)
	defer over.seg.Close()
	r := m.region()
	r.ID, r.Addr, r.Mem = over.ID, m.Addr+4096, m.Bytes[4096:8192]
	if _, err := n.T.RegisterRegion(ctx, r); !errors.Is(err, plugins.ErrInvalidArgument) {
		t.Errorf("registering a region overlapping region %d: %v, want ErrInvalidArgument", m.ID, err)
	}
	// The original still works.
	peer := NewNode(t, h, "peer")
	dst := peer.Alloc(t, 64<<10, 0)
	Fill(m.Bytes, 12)
	n.MustTransfer(t, n.Connect(t, peer), []plugins.Op{{Kind: plugins.OpWrite, LocalRegion: m.ID, RemoteRegion: dst.ID, Length: 64 << 10}})
	equal(t, "WRITE from a region after refused duplicates", dst.Bytes, m.Bytes)
}

// testCloseDuringRegister: Close while RegisterRegion calls run returns,
// and every RegisterRegion returns: registered, or ErrClosed; one made
// after Close returned fails with ErrClosed.
func testCloseDuringRegister(t *testing.T, h Harness) {
	n := NewNode(t, h, "node")
	const k = 64
	mems := make([]*Mem, k)
	for i := range mems {
		mems[i] = n.newMem(t, 64<<10, 0)
	}
	defer func() {
		for _, m := range mems {
			m.seg.Close()
		}
	}()
	register := func(m *Mem) error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err := n.T.RegisterRegion(ctx, m.region())
		return err
	}
	started, closed, finished := make(chan struct{}), make(chan struct{}), make(chan struct{})
	errs := make([]error, k)
	go func() {
		defer close(finished)
		for i, m := range mems[:k-1] {
			if i == 4 {
				close(started)
			}
			errs[i] = register(m)
		}
		<-closed
		errs[k-1] = register(mems[k-1])
	}()
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := n.T.Close(ctx); err != nil {
		t.Fatalf("Close during RegisterRegion: %v", err)
	}
	close(closed)
	select {
	case <-finished:
	case <-time.After(h.FailWithin):
		t.Fatalf("RegisterRegion still running %v after Close", h.FailWithin)
	}
	for i, err := range errs[:k-1] {
		if err != nil && !errors.Is(err, plugins.ErrClosed) {
			t.Errorf("RegisterRegion %d during Close: %v, want nil or ErrClosed", i, err)
		}
	}
	if !errors.Is(errs[k-1], plugins.ErrClosed) {
		t.Errorf("RegisterRegion after Close returned: %v, want ErrClosed", errs[k-1])
	}
}
