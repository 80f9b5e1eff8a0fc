package connector_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/kvconnect/kvconnect/connector"
	"github.com/kvconnect/kvconnect/internal/pluginrpc"
	"github.com/kvconnect/kvconnect/internal/testbin"
	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/plugins/host"
	"github.com/kvconnect/kvconnect/plugins/transporttest"
)

func TestMain(m *testing.M) {
	testbin.HostSide()
	testbin.Main(m)
}

// pluginDir builds the plugins the connector's tests launch (tcp, and
// rdma for the fallback chains) and returns the directory holding them.
func pluginDir(t testing.TB) string { return testbin.PluginDir(t, "rdma", "tcp") }

func newNode(t testing.TB, opts ...connector.Option) *connector.Connector {
	t.Helper()
	cfg := connector.Config{Protocol: "tcp", PluginDir: pluginDir(t)}
	opts = append([]connector.Option{connector.WithLogger(zaptest.NewLogger(t))}, opts...)
	c, err := connector.New(context.Background(), cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return c
}

func alloc(t testing.TB, c *connector.Connector, size int) *connector.Region {
	t.Helper()
	r, err := c.Alloc(context.Background(), size)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestEndToEndPlugin(t *testing.T) {
	ctx := context.Background()
	a, b := newNode(t), newNode(t)
	if st := a.Status(); st.Mode != "plugin" || st.Transport != "tcp" || st.PluginPID == 0 || st.PluginPID == os.Getpid() {
		t.Fatalf("status: %+v, want tcp running as a plugin process", st)
	}
	src := alloc(t, a, 8<<20)
	dst := alloc(t, b, 8<<20)
	transporttest.Fill(src.Bytes(), 1)
	peer, err := a.Open(ctx, b.SessionID())
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := a.Open(ctx, b.SessionID()); again != peer {
		t.Fatal("second Open of the same session returned a different peer")
	}
	if got := peer.Regions(); len(got) != 1 || got[0].ID != dst.ID() || got[0].Addr != dst.Addr() || got[0].Len != uint64(dst.Len()) {
		t.Fatalf("peer regions %+v, want the one region of b", got)
	}
	if err := a.Transfer(ctx, peer, connector.Op{Kind: connector.OpWrite, LocalRegion: src.ID(), RemoteRegion: dst.ID(), Length: uint64(src.Len())}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(dst.Bytes(), src.Bytes()) {
		t.Fatal("WRITE: destination differs")
	}
	// Mooncake-style absolute addresses, both directions.
	back := alloc(t, a, 1<<20)
	if err := a.TransferSyncRead(ctx, b.SessionID(), back.Addr()+10, dst.Addr()+12345, 500000); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(back.Bytes()[10:500010], src.Bytes()[12345:512345]) {
		t.Fatal("TransferSyncRead: data differs")
	}
	transporttest.Fill(back.Bytes(), 2)
	if err := a.TransferSyncWrite(ctx, b.SessionID(), back.Addr(), dst.Addr()+(7<<20), 1<<20); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(dst.Bytes()[7<<20:], back.Bytes()) {
		t.Fatal("TransferSyncWrite: data differs")
	}
	err = a.TransferSyncWrite(ctx, b.SessionID(), back.Addr(), dst.Addr()+(8<<20)-10, 20)
	if !errors.Is(err, connector.ErrOutOfBounds) {
		t.Fatalf("TransferSyncWrite past the end: %v, want ErrOutOfBounds", err)
	}
	err = a.TransferSyncWrite(ctx, b.SessionID(), 0x10, dst.Addr(), 20)
	if !errors.Is(err, connector.ErrUnknownRegion) {
		t.Fatalf("TransferSyncWrite from unregistered memory: %v, want ErrUnknownRegion", err)
	}
	// Notifications ride the handshake port.
	if err := a.Notify(ctx, b.SessionID(), "done", "blocks 0-9"); err != nil {
		t.Fatal(err)
	}
	select {
	case n := <-b.Notifications():
		if n.From != a.SessionID() || n.Name != "done" || n.Msg != "blocks 0-9" {
			t.Fatalf("notification %+v", n)
		}
	case <-time.After(testbin.WaitLimit):
		t.Fatal("no notification")
	}
}

// TestNoPayloadInGRPC caps the plugin's gRPC messages at 16 KiB both ways:
// a 64 MiB transfer still succeeds because its bytes never cross gRPC,
// while a batch whose op list alone exceeds the cap is refused, which
// shows the cap is in force. With the shared-memory rings (the default)
// not even that batch crosses gRPC: it goes through.
func TestNoPayloadInGRPC(t *testing.T) {
	t.Run("grpc", func(t *testing.T) {
		t.Setenv(pluginrpc.EnvRings, "0")
		testNoPayloadInGRPC(t, false)
	})
	t.Run("ring", func(t *testing.T) { testNoPayloadInGRPC(t, true) })
}

func testNoPayloadInGRPC(t *testing.T, rings bool) {
	const limit = 16 << 10
	capGRPC := connector.WithLaunchHook(func(lc *host.LaunchConfig) {
		lc.GRPCMaxMessageSize = limit
	})
	ctx := context.Background()
	a, b := newNode(t, capGRPC), newNode(t, capGRPC)
	src := alloc(t, a, 64<<20)
	dst := alloc(t, b, 64<<20)
	transporttest.Fill(src.Bytes(), 3)
	peer, err := a.Open(ctx, b.SessionID())
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Transfer(ctx, peer, connector.Op{Kind: connector.OpWrite, LocalRegion: src.ID(), RemoteRegion: dst.ID(), Length: 64 << 20}); err != nil {
		t.Fatalf("64 MiB WRITE with gRPC capped at %d bytes: %v", limit, err)
	}
	if !bytes.Equal(dst.Bytes(), src.Bytes()) {
		t.Fatal("64 MiB WRITE: destination differs")
	}
	clear(src.Bytes())
	if err := a.Transfer(ctx, peer, connector.Op{Kind: connector.OpRead, LocalRegion: src.ID(), RemoteRegion: dst.ID(), Length: 64 << 20}); err != nil {
		t.Fatalf("64 MiB READ with gRPC capped: %v", err)
	}
	if !bytes.Equal(dst.Bytes(), src.Bytes()) {
		t.Fatal("64 MiB READ: data differs")
	}
	many := make([]connector.Op, 4000) // ~4000 * 20 bytes of op list > 16 KiB
	for i := range many {
		many[i] = connector.Op{Kind: connector.OpWrite, LocalRegion: src.ID(), RemoteRegion: dst.ID(), RemoteOffset: uint64(i), Length: 1}
	}
	err = a.Transfer(ctx, peer, many...)
	if rings {
		st := a.Status().Transports[0]
		if st.DataPath != "ring" {
			t.Fatalf("data path %q, want ring", st.DataPath)
		}
		if err != nil {
			t.Fatalf("a batch whose op list exceeds the gRPC cap, through the ring: %v", err)
		}
		if st.Ring == nil || st.Ring.Batches != 3 {
			t.Fatalf("the ring's counts in Status: %+v, want 3 batches", st.Ring)
		}
		return
	}
	if err == nil {
		t.Fatal("a batch larger than the gRPC cap went through: the cap is not in force, so this test proves nothing")
	}
}

// TestOutOfBoundsWriteLeavesNeighboursUntouched writes past the end of one
// region of the peer and checks that both that region and the peer's other
// region keep their contents.
func TestOutOfBoundsWriteLeavesNeighboursUntouched(t *testing.T) {
	ctx := context.Background()
	a, b := newNode(t), newNode(t)
	src := alloc(t, a, 1<<20)
	transporttest.Fill(src.Bytes(), 9)
	r1, r2 := alloc(t, b, 64<<10), alloc(t, b, 64<<10)
	transporttest.Fill(r1.Bytes(), 10)
	transporttest.Fill(r2.Bytes(), 11)
	before1, before2 := bytes.Clone(r1.Bytes()), bytes.Clone(r2.Bytes())
	peer, err := a.Open(ctx, b.SessionID())
	if err != nil {
		t.Fatal(err)
	}
	err = a.Transfer(ctx, peer,
		connector.Op{Kind: connector.OpWrite, LocalRegion: src.ID(), RemoteRegion: r1.ID(), RemoteOffset: 64<<10 - 8, Length: 4096},
		connector.Op{Kind: connector.OpWrite, LocalRegion: src.ID(), RemoteRegion: r1.ID(), RemoteOffset: 0, Length: 1 << 20},
		connector.Op{Kind: connector.OpWrite, LocalRegion: src.ID(), RemoteRegion: 0, RemoteOffset: r1.Addr() + 64<<10 - 1, Length: 2},
	)
	var be *connector.BatchError
	if !errors.As(err, &be) || be.Failed != 3 || !errors.Is(err, connector.ErrOutOfBounds) {
		t.Fatalf("got %v, want 3 ops failed with ErrOutOfBounds", err)
	}
	if !bytes.Equal(r1.Bytes(), before1) || !bytes.Equal(r2.Bytes(), before2) {
		t.Fatal("a refused WRITE changed the target's memory")
	}
}

// TestPluginKilledMidBatch kills the plugin process while a batch runs: the
// batch fails with ErrTransportCrashed within a bounded time, the node
// restarts the plugin and says so in Status, the next batch succeeds (the
// peer reconnects on its own), and Close leaves no process, goroutine or
// descriptor behind.
func TestPluginKilledMidBatch(t *testing.T) {
	ctx := context.Background()
	b := newNode(t)
	dst := alloc(t, b, 16<<20)
	fdsBefore := countFDs(t)
	goroutinesBefore := runtime.NumGoroutine()

	cfg := connector.Config{Protocol: "tcp", PluginDir: pluginDir(t)}
	a, err := connector.New(ctx, cfg, connector.WithLogger(zaptest.NewLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	src, err := a.Alloc(ctx, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	transporttest.Fill(src.Bytes(), 12)
	peer, err := a.Open(ctx, b.SessionID())
	if err != nil {
		t.Fatal(err)
	}
	ops := make([]connector.Op, 8192) // 8 GiB of writes: still running when the plugin dies
	for i := range ops {
		ops[i] = connector.Op{Kind: connector.OpWrite, LocalRegion: src.ID(), RemoteRegion: dst.ID(), RemoteOffset: uint64(i%16) << 20, Length: 1 << 20}
	}
	batch, err := a.Submit(ctx, peer, ops)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	pid := a.Status().PluginPID
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	wctx, cancel := context.WithTimeout(ctx, testbin.WaitLimit)
	defer cancel()
	err = batch.Wait(wctx)
	if !errors.Is(err, connector.ErrTransportCrashed) {
		t.Fatalf("batch after the plugin was killed: %v, want ErrTransportCrashed", err)
	}
	t.Logf("batch failed %v after the kill: %v", time.Since(killed), err)

	// The node restarts the plugin.
	testbin.Eventually(t, "the plugin to be restarted", func() bool {
		st := a.Status()
		return st.Healthy && st.Transports[0].Restarts == 1 && st.PluginPID != pid
	})
	newPID := a.Status().PluginPID
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("the killed plugin %d still exists", pid)
	}
	// The same peer works again: it reconnects through the new plugin.
	if err := a.Transfer(ctx, peer, connector.Op{Kind: connector.OpWrite, LocalRegion: src.ID(), RemoteRegion: dst.ID(), Length: 1 << 20}); err != nil {
		t.Fatalf("batch after the restart: %v", err)
	}
	if !bytes.Equal(dst.Bytes()[:1<<20], src.Bytes()) {
		t.Fatal("data differs after the restart")
	}
	// And b reaches a's regions through a's new endpoint.
	if err := b.TransferSyncRead(ctx, a.SessionID(), dst.Addr(), src.Addr(), 4096); err != nil {
		t.Fatalf("peer reading from the restarted node: %v", err)
	}

	if err := a.Close(); err != nil {
		t.Fatalf("Close after the restart: %v", err)
	}
	if err := a.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := syscall.Kill(newPID, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("restarted plugin process %d still exists after Close (kill 0: %v)", newPID, err)
	}
	testbin.Eventually(t, "goroutines to return to their count before the node", func() bool { return runtime.NumGoroutine() <= goroutinesBefore })
	testbin.Eventually(t, "descriptors to return to their count before the node", func() bool { return countFDs(t) <= fdsBefore })
}

func TestCloseReleasesPluginAndRejectsUse(t *testing.T) {
	ctx := context.Background()
	fdsBefore := countFDs(t)
	cfg := connector.Config{Protocol: "tcp", PluginDir: pluginDir(t)}
	a, err := connector.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	r, err := a.Alloc(ctx, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	pid := a.Status().PluginPID
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("plugin process %d still exists after Close", pid)
	}
	if r.Bytes() == nil {
		t.Fatal("region lost its slice header") // the slice is kept; the mapping is gone
	}
	if _, err := a.Alloc(ctx, 10); !errors.Is(err, connector.ErrClosed) {
		t.Fatalf("Alloc after Close: %v, want ErrClosed", err)
	}
	if _, err := a.Open(ctx, "127.0.0.1:1"); !errors.Is(err, connector.ErrClosed) {
		t.Fatalf("Open after Close: %v, want ErrClosed", err)
	}
	testbin.Eventually(t, "descriptors to be released", func() bool { return countFDs(t) <= fdsBefore })
}

func TestInProcessTransport(t *testing.T) {
	ctx := context.Background()
	inproc := connector.WithInProcess("tcp")
	a, err := connector.New(ctx, connector.Config{Protocol: "tcp"}, inproc)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b := newNode(t) // plugin on the other side: the two modes interoperate
	if st := a.Status(); st.Mode != "in-process" {
		t.Fatalf("mode %q, want in-process", st.Mode)
	}
	src, dst := alloc(t, a, 1<<20), alloc(t, b, 1<<20)
	transporttest.Fill(src.Bytes(), 4)
	if err := a.TransferSyncWrite(ctx, b.SessionID(), src.Addr(), dst.Addr(), 1<<20); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(src.Bytes(), dst.Bytes()) {
		t.Fatal("in-process to plugin WRITE: data differs")
	}
}

func TestPluginNotFoundNamesSearchedPaths(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(host.EnvPluginDir, "")
	_, err := connector.New(context.Background(), connector.Config{Protocol: "nosuch", PluginDir: dir})
	if !errors.Is(err, connector.ErrPluginNotFound) {
		t.Fatalf("got %v, want ErrPluginNotFound", err)
	}
	for _, want := range []string{filepath.Join(dir, "kvconnect-transport-nosuch"), "$PATH"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	tests := []struct {
		cfg  connector.Config
		want string
		is   error
	}{
		{connector.Config{Protocol: "RDMA!"}, "protocol", connector.ErrInvalidArgument},
		{connector.Config{RPCPort: 70000}, "rpc_port", connector.ErrInvalidArgument},
		{connector.Config{Metadata: "etcd://x"}, "metadata", connector.ErrInvalidArgument},
		{connector.Config{Metadata: "etcd://127.0.0.1:1", ConnectTimeout: time.Second}, "127.0.0.1:1", connector.ErrPeerUnreachable},
	}
	for _, tt := range tests {
		_, err := connector.New(context.Background(), tt.cfg)
		if !errors.Is(err, tt.is) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("New(%+v): %v, want %v naming %q", tt.cfg, err, tt.is, tt.want)
		}
	}
}

// TestNoCommonTransport answers the handshake with a descriptor that has
// only rdma up, as a real Mooncake-style peer would.
func TestNoCommonTransport(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		var hdr [9]byte
		if _, err := nc.Read(hdr[:]); err != nil {
			return
		}
		body := make([]byte, binary.LittleEndian.Uint64(hdr[:8])-1)
		nc.Read(body)
		d, _ := json.Marshal(connector.SegmentDescriptor{Name: ln.Addr().String(), Protocol: "rdma",
			KVConnect: &connector.NodeDescriptor{Version: 2, Protocol: "rdma", Transports: []connector.TransportEndpoint{{Name: "rdma", Endpoint: []byte("x")}}}})
		out := make([]byte, 9+len(d))
		binary.LittleEndian.PutUint64(out, uint64(1+len(d)))
		out[8] = 1
		copy(out[9:], d)
		nc.Write(out)
	}()
	a := newNode(t)
	_, err = a.Open(context.Background(), ln.Addr().String())
	if !errors.Is(err, connector.ErrNoCommonTransport) || !strings.Contains(err.Error(), "[rdma]") {
		t.Fatalf("got %v, want ErrNoCommonTransport naming the peer's transports", err)
	}
}

func TestOpenUnreachable(t *testing.T) {
	a := newNode(t)
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	if _, err := a.Open(context.Background(), addr); !errors.Is(err, connector.ErrPeerUnreachable) {
		t.Fatalf("Open(closed port): %v, want ErrPeerUnreachable", err)
	}
	if _, err := a.Open(context.Background(), "no-port"); !errors.Is(err, connector.ErrInvalidArgument) {
		t.Fatalf("Open(no-port): %v, want ErrInvalidArgument", err)
	}
}

func countFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("cannot count descriptors without /proc: %v", err)
	}
	return len(ents)
}

// TestPeerRestartReconnects restarts the remote node on the same RPC port
// (a decode server that crashed and came back): the batch in flight during
// the outage fails with ErrPeerUnreachable, and the same *Peer reconnects
// on the next batch without the caller opening it again.
func TestPeerRestartReconnects(t *testing.T) {
	ctx := context.Background()
	a := newNode(t)
	b := newNode(t)
	_, port, _ := net.SplitHostPort(b.SessionID())
	src := alloc(t, a, 1<<20)
	transporttest.Fill(src.Bytes(), 6)
	alloc(t, b, 1<<20)
	peer, err := a.Open(ctx, b.SessionID())
	if err != nil {
		t.Fatal(err)
	}
	write := connector.Op{Kind: connector.OpWrite, LocalRegion: src.ID(), RemoteRegion: 1, Length: 1 << 20}
	if err := a.Transfer(ctx, peer, write); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := a.Transfer(ctx, peer, write); !errors.Is(err, connector.ErrPeerUnreachable) {
		t.Fatalf("batch while the peer is down: %v, want ErrPeerUnreachable", err)
	}
	rpcPort, _ := strconv.Atoi(port)
	b2, err := connector.New(ctx, connector.Config{Protocol: "tcp", PluginDir: pluginDir(t), RPCPort: rpcPort})
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Close()
	dst := alloc(t, b2, 1<<20)
	if err := a.Transfer(ctx, peer, write); err != nil {
		t.Fatalf("batch after the peer came back: %v", err)
	}
	if !bytes.Equal(dst.Bytes(), src.Bytes()) {
		t.Fatal("data differs after reconnecting")
	}
}

// TestRestartGivesUp: when the plugin cannot be started again (its binary
// is gone), the node stops trying after its attempts and reports the
// transport as down; batches on it fail with ErrTransportCrashed.
func TestRestartGivesUp(t *testing.T) {
	defer connector.SetRestartBackoff([]time.Duration{time.Millisecond, time.Millisecond})()
	dir := t.TempDir()
	bin, err := testbin.Build("./cmd/kvconnect-transport-tcp", "kvconnect-transport-tcp")
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	mine := filepath.Join(dir, "kvconnect-transport-tcp")
	if err := os.WriteFile(mine, data, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(host.EnvPluginDir, "")
	t.Setenv("PATH", dir)
	ctx := context.Background()
	b := newNode(t)
	alloc(t, b, 1<<20)
	core, logs := observer.New(zapcore.WarnLevel)
	a, err := connector.New(ctx, connector.Config{Protocol: "tcp", PluginDir: dir}, connector.WithLogger(zap.New(core)))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	src := alloc(t, a, 1<<20)
	peer, err := a.Open(ctx, b.SessionID())
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(mine)
	if err := syscall.Kill(a.Status().PluginPID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testbin.Eventually(t, "the node to report the transport down", func() bool { return !a.Status().Healthy })
	testbin.Eventually(t, "both restart attempts to fail", func() bool {
		return logs.FilterMessageSnippet("giving up restarting the transport plugin").Len() > 0
	})
	if st := a.Status(); st.Healthy || st.Transports[0].Restarts != 0 {
		t.Fatalf("status %+v: want the transport down and never restarted", st)
	}
	err = a.Transfer(ctx, peer, connector.Op{Kind: connector.OpWrite, LocalRegion: src.ID(), RemoteRegion: 1, Length: 10})
	if !errors.Is(err, connector.ErrTransportCrashed) {
		t.Fatalf("batch with the transport down: %v, want ErrTransportCrashed", err)
	}
}

// TestLargestBatchThroughPlugin: a batch of MaxBatchOps ops works through
// a plugin as it does in-process; one more op is refused up front.
func TestLargestBatchThroughPlugin(t *testing.T) {
	ctx := context.Background()
	a, b := newNode(t), newNode(t)
	src, dst := alloc(t, a, plugins.MaxBatchOps), alloc(t, b, plugins.MaxBatchOps)
	transporttest.Fill(src.Bytes(), 13)
	peer, err := a.Open(ctx, b.SessionID())
	if err != nil {
		t.Fatal(err)
	}
	ops := make([]connector.Op, plugins.MaxBatchOps)
	for i := range ops {
		ops[i] = connector.Op{Kind: connector.OpWrite, LocalRegion: src.ID(), LocalOffset: uint64(i), RemoteRegion: dst.ID(), RemoteOffset: uint64(i), Length: 1}
	}
	if err := a.Transfer(ctx, peer, ops...); err != nil {
		t.Fatalf("batch of %d ops: %v", len(ops), err)
	}
	if !bytes.Equal(src.Bytes(), dst.Bytes()) {
		t.Fatal("data differs")
	}
	if _, err := a.Submit(ctx, peer, append(ops, ops[0])); !errors.Is(err, connector.ErrInvalidArgument) || !strings.Contains(err.Error(), "split") {
		t.Fatalf("batch of %d ops: %v, want ErrInvalidArgument saying to split it", len(ops)+1, err)
	}
}

func TestNotificationsClosedByClose(t *testing.T) {
	a, err := connector.New(context.Background(), connector.Config{Protocol: "tcp", PluginDir: pluginDir(t)})
	if err != nil {
		t.Fatal(err)
	}
	a.Close()
	select {
	case _, ok := <-a.Notifications():
		if ok {
			t.Fatal("a notification arrived after Close")
		}
	case <-time.After(testbin.WaitLimit):
		t.Fatal("Notifications is still open after Close")
	}
}
