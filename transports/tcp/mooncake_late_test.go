//go:build linux

package tcp_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/kvconnect/kvconnect/internal/testbin"
	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/plugins/transporttest"
	"github.com/kvconnect/kvconnect/transports/tcp"
)

// TestGivenUpMooncakeWriteIsReset: a WRITE to a Mooncake peer that stops
// reading (a stopped or wedged process) times out, and the lane is reset,
// not closed: when the peer reads again it finds only what its kernel had
// received before the give-up, then the reset, never the rest of the
// WRITE (with a plain close, the initiator's kernel would deliver its
// queued bytes, and then a FIN, once the peer reads).
func TestGivenUpMooncakeWriteIsReset(t *testing.T) {
	// The peer's receive buffer is small, as a busy peer's is full.
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
		}); err != nil {
			return err
		}
		return serr
	}}
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		if nc, err := ln.Accept(); err == nil {
			accepted <- nc
		}
	}()
	const size = 16 << 20
	a := transporttest.NewNode(t, inproc(`{"op_timeout":"300ms","mooncake_lanes":1,"chunk_size":"16MiB"}`), "a")
	src := a.Alloc(t, size, 0)
	port := ln.Addr().(*net.TCPAddr).Port
	peer, err := a.T.Connect(context.Background(), plugins.PeerInfo{Name: "stopped", Endpoint: tcp.MooncakeEndpoint("127.0.0.1", port, 2),
		Regions: []plugins.RemoteRegion{{ID: 1, Addr: 1 << 30, Size: size}}})
	if err != nil {
		t.Fatal(err)
	}
	nc := <-accepted // the lane Connect dialed
	defer nc.Close()
	res, _ := a.Transfer(t, peer, []plugins.Op{{Kind: plugins.OpWrite, LocalRegion: src.ID, RemoteRegion: 1, Length: size}})
	if !errors.Is(res[0].Err, plugins.ErrTimeout) {
		t.Fatalf("a WRITE to a peer that reads nothing: %v, want ErrTimeout", res[0].Err)
	}
	// The peer reads again.
	n, err := io.Copy(io.Discard, nc)
	t.Logf("the peer read %d bytes of the %d-byte WRITE after the give-up, then: %v", n, size+24, err)
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("the lane given up on ended with %v after %d bytes, want a reset (ECONNRESET)", err, n)
	}
	if n >= 1<<20 {
		t.Fatalf("the peer read %d bytes after the give-up: more than its receive buffer held", n)
	}
}

// TestStoppedTargetDropsGivenUpMooncakeWrite: a tcp transport's data port
// (here a plugin process) serving Mooncake's protocol v2 is stopped
// (SIGSTOP) while a WRITE is on its way; the WRITE times out at the
// initiator. When the target runs again, the request is still in its
// socket: it must not be applied (counted failed, the region unchanged),
// since the initiator reported it failed and may have written something
// else there since.
func TestStoppedTargetDropsGivenUpMooncakeWrite(t *testing.T) {
	bin, err := testbin.Build("./cmd/kvconnect-transport-tcp", "kvconnect-transport-tcp")
	if err != nil {
		t.Fatal(err)
	}
	target := transporttest.NewNode(t, transporttest.Harness{New: transporttest.Plugin(bin), PeerEndpoint: mooncakeEndpoint(t, 2)}, "target")
	pid := target.T.(interface{ Pid() int }).Pid()
	const size = 64 << 10
	dst := target.Alloc(t, size, 0)
	a := transporttest.NewNode(t, inproc(`{"op_timeout":"500ms","mooncake_lanes":1}`), "a")
	src := a.Alloc(t, size, 0)
	peer := a.Connect(t, target)
	transporttest.Fill(src.Bytes, 1)
	a.MustTransfer(t, peer, []plugins.Op{{Kind: plugins.OpWrite, LocalRegion: src.ID, RemoteRegion: dst.ID, Length: size}})
	before := bytes.Clone(dst.Bytes) // shared memory: readable while the target is stopped
	if !bytes.Equal(before, src.Bytes) {
		t.Fatal("the first WRITE did not land")
	}
	st0 := served(t, target)

	testbin.Stop(t, pid, false)
	transporttest.Fill(src.Bytes, 2)
	res, _ := a.Transfer(t, peer, []plugins.Op{{Kind: plugins.OpWrite, LocalRegion: src.ID, RemoteRegion: dst.ID, Length: size}})
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(res[0].Err, plugins.ErrTimeout) {
		t.Fatalf("a WRITE to a stopped target: %v, want ErrTimeout", res[0].Err)
	}
	// The target reads the request once it runs: it reports the WRITE
	// failed (dropped) or, wrongly, completed.
	failed0, _ := servedCount(st0, plugins.OpWrite, plugins.ResultFailed)
	done0, _ := servedCount(st0, plugins.OpWrite, plugins.ResultCompleted)
	deadline := time.Now().Add(20 * time.Second)
	for {
		st := served(t, target)
		failed, _ := servedCount(st, plugins.OpWrite, plugins.ResultFailed)
		done, _ := servedCount(st, plugins.OpWrite, plugins.ResultCompleted)
		if done != done0 {
			t.Fatalf("the target applied the WRITE its initiator had given up on (completed WRITEs %d -> %d)", done0, done)
		}
		if failed > failed0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the target did not read the given-up WRITE within 20 s of SIGCONT")
		}
		time.Sleep(20 * time.Millisecond) // polling what the target reports
	}
	if !bytes.Equal(dst.Bytes, before) {
		t.Fatal("the region changed after its WRITE was given up on")
	}
}
