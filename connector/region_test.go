package connector_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/kvconnect/kvconnect/connector"
	"github.com/kvconnect/kvconnect/internal/testbin"
	"github.com/kvconnect/kvconnect/plugins/host"
)

// wedgedPeer serves a P2P handshake whose descriptor points at a tcp data
// endpoint that accepts and reads but never answers. It returns the
// session id.
func wedgedPeer(t *testing.T) string {
	t.Helper()
	data, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { data.Close() })
	go func() {
		for {
			nc, err := data.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(io.Discard, nc); nc.Close() }()
		}
	}()
	rpc, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rpc.Close() })
	desc, _ := json.Marshal(connector.SegmentDescriptor{Name: rpc.Addr().String(), Protocol: "tcp",
		KVConnect: &connector.NodeDescriptor{Version: 2, Protocol: "tcp", Transports: []connector.TransportEndpoint{{Name: "tcp", Endpoint: []byte(data.Addr().String())}}},
		Buffers:   []connector.BufferDescriptor{{Name: rpc.Addr().String(), ID: 1, Addr: 1 << 30, Length: 1 << 20}}})
	go func() {
		for {
			nc, err := rpc.Accept()
			if err != nil {
				return
			}
			var hdr [9]byte
			if _, err := io.ReadFull(nc, hdr[:]); err == nil {
				io.CopyN(io.Discard, nc, int64(binary.LittleEndian.Uint64(hdr[:8])-1))
				out := make([]byte, 9+len(desc))
				binary.LittleEndian.PutUint64(out, uint64(1+len(desc)))
				out[8] = hdr[8]
				copy(out[9:], desc)
				nc.Write(out)
			}
			nc.Close()
		}
	}()
	return rpc.Addr().String()
}

func mapped(t *testing.T, name string) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Skipf("cannot read /proc/self/maps: %v", err)
	}
	return strings.Contains(string(b), "kvconnect:"+name+" ")
}

// TestFreeWhileInUse: Free gives up while an op still uses the region and
// keeps it mapped; a later Free finishes once the op has ended.
func TestFreeWhileInUse(t *testing.T) {
	ctx := context.Background()
	c, err := connector.New(ctx, connector.Config{Protocol: "tcp", Transports: map[string]map[string]any{"tcp": {"op_timeout": "600ms"}}},
		connector.WithInProcess("tcp"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r, err := c.Alloc(ctx, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	peer, err := c.Open(ctx, wedgedPeer(t))
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Submit(ctx, peer, []connector.Op{{Kind: connector.OpRead, LocalRegion: r.ID(), RemoteRegion: 1, Length: 4096}})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if err := r.Free(short); !errors.Is(err, connector.ErrTimeout) {
		t.Fatalf("Free with a READ in flight: %v, want ErrTimeout", err)
	}
	if !mapped(t, "slab-1") {
		t.Fatal("the region was unmapped while a READ could still write into it")
	}
	if err := b.Wait(ctx); !errors.Is(err, connector.ErrTimeout) {
		t.Fatalf("the wedged READ: %v, want ErrTimeout", err)
	}
	if err := r.Free(ctx); err != nil {
		t.Fatalf("Free after the op ended: %v", err)
	}
	if mapped(t, "slab-1") {
		t.Fatal("the region is still mapped after Free succeeded")
	}
}

// TestAllocWithASecondaryTransportDown: the tcp kept beside the preferred
// transport dies for good (its binary is gone); Alloc still works on the
// transports that are up.
func TestAllocWithASecondaryTransportDown(t *testing.T) {
	defer connector.SetRestartBackoff([]time.Duration{time.Millisecond})()
	dir := t.TempDir()
	for _, name := range []string{"tcp", "ucx"} {
		bin, err := testbin.Build("./cmd/kvconnect-transport-"+name, "kvconnect-transport-"+name)
		if err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(bin)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(bin)), data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv(host.EnvPluginDir, "")
	t.Setenv("PATH", dir)
	ctx := context.Background()
	core, logs := observer.New(zapcore.WarnLevel)
	c, err := connector.New(ctx, connector.Config{Protocol: "ucx", Fallback: []string{"tcp"}, PluginDir: dir}, connector.WithLogger(zap.New(core)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	st := c.Status()
	if len(st.Transports) != 2 || st.Transports[1].Name != "tcp" {
		t.Fatalf("transports %+v, want ucx with tcp kept beside it", st.Transports)
	}
	os.Remove(filepath.Join(dir, "kvconnect-transport-tcp"))
	if err := syscall.Kill(st.Transports[1].PluginPID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testbin.Eventually(t, "tcp to be reported down", func() bool { return !c.Status().Transports[1].Healthy })
	testbin.Eventually(t, "the one restart attempt to fail", func() bool {
		return logs.FilterMessageSnippet("giving up restarting the transport plugin").Len() > 0
	})
	r, err := c.Alloc(ctx, 1<<20)
	if err != nil {
		t.Fatalf("Alloc with the kept tcp down: %v", err)
	}
	if err := r.Free(ctx); err != nil {
		t.Fatalf("Free with the kept tcp down: %v", err)
	}
}
