//go:build linux && cgo

package ucx_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/kvconnect/kvconnect/internal/testbin"
	ucxlib "github.com/kvconnect/kvconnect/internal/ucx"
	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/plugins/transporttest"
	"github.com/kvconnect/kvconnect/transports/internal/ucxpath"
	"github.com/kvconnect/kvconnect/transports/ucx"
)

func initErr(t *testing.T, tr plugins.Transport, req plugins.InitRequest) *plugins.InitError {
	t.Helper()
	t.Cleanup(func() { tr.Close(context.Background()) })
	if req.Hostname == "" {
		req.Hostname = "127.0.0.1"
	}
	_, err := tr.Init(context.Background(), req)
	var ie *plugins.InitError
	if !errors.As(err, &ie) {
		t.Fatalf("Init(%s): got %v, want an *InitError", req.Options, err)
	}
	return ie
}

func TestOptionErrors(t *testing.T) {
	for _, c := range []struct {
		opts string
		key  string
	}{
		{`{"tsl":"tcp"}`, `unknown option transports.ucx.tsl (did you mean "tls"?)`},
		{`{"tls":7}`, "transports.ucx.tls"},
		{`{"tls":"tcp,,sm"}`, "transports.ucx.tls"},
		{`{"tls":"tcp sm"}`, "transports.ucx.tls"},
		{`{"net_devices":"a b"}`, "transports.ucx.net_devices"},
		{`{"thread_mode":"parallel"}`, "transports.ucx.thread_mode"},
		{`{"error_mode":"always"}`, "transports.ucx.error_mode"},
		{`{"max_inflight":0}`, "transports.ucx.max_inflight"},
		{`{"op_timeout":"-1s"}`, "transports.ucx.op_timeout"},
		{`{"connect_timeout":0}`, "transports.ucx.connect_timeout"},
		{`[1]`, "must be a JSON object"},
		{`{"ucx_config":{"TCP_TX_SEG_SIZE":"64k"}}`, "TX_SEG_SIZE for UCX_TCP_TX_SEG_SIZE"},
		{`{"ucx_config":{"RNDV_THRESHH":"64k"}}`, `did you mean "RNDV_THRESH"`},
		{`{"ucx_config":{"TLS":"tcp"}}`, "set transports.ucx.tls instead"},
		{`{"ucx_config":{"UCX_RNDV_THRESH":"1k"}}`, "without the UCX_ prefix"},
		{`{"ucx_config":{"rndv_thresh":"1k"}}`, "upper case"},
		{`{"ucx_config":{"MM_SEG_SIZE":"64k"}}`, "below 64KiB"},
		{`{"ucx_config":{"RNDV_THRESH":"abc"}}`, "UCX rejected the configuration"},
	} {
		ie := initErr(t, ucx.New(), plugins.InitRequest{Options: []byte(c.opts)})
		if ie.Step != plugins.StepConfigure || !errors.Is(ie, plugins.ErrInvalidArgument) || !strings.Contains(ie.Error(), c.key) {
			t.Errorf("%s: got %v (step %q), want ErrInvalidArgument at %q naming %q", c.opts, ie, ie.Step, plugins.StepConfigure, c.key)
		}
	}
}

// A lane list or device UCX cannot use is ErrUnavailable (the fallback
// chain moves on) with UCX's status and what this host offers.
func TestNoUsableTransport(t *testing.T) {
	for _, req := range []plugins.InitRequest{
		{Options: []byte(`{"tls":"rc,ud"}`)},
		{Options: []byte(`{"tls":"tcp","net_devices":"nosuchdev0"}`)},
		{Options: []byte(`{"tls":"tcp"}`), DeviceName: "mlx5_0"}, // mapped to mlx5_0:1: no tcp device of that name
	} {
		ie := initErr(t, ucx.New(), req)
		if ie.Step != plugins.StepProbeDevices || !errors.Is(ie, plugins.ErrUnavailable) || ie.NativeName != "UCS_ERR_NO_DEVICE" {
			t.Errorf("%s %q: got %v (step %q, native %q)", req.Options, req.DeviceName, ie, ie.Step, ie.NativeName)
		}
		if !strings.Contains(ie.Cause, "tcp/lo") || len(ie.Hints) == 0 {
			t.Errorf("the diagnosis should list what this host offers and hint what to do: %v %v", ie.Cause, ie.Hints)
		}
		if req.DeviceName != "" && !strings.Contains(ie.Cause, `net_devices="mlx5_0:1"`) {
			t.Errorf("device_name mlx5_0 should become UCX's mlx5_0:1: %v", ie.Cause)
		}
	}
}

// ucx_config reaches UCX for this transport's context only.
func TestUCXConfig(t *testing.T) {
	tr := ucx.New()
	defer tr.Close(context.Background())
	if _, err := tr.Init(context.Background(), plugins.InitRequest{Hostname: "127.0.0.1",
		Options: []byte(`{"tls":"tcp","ucx_config":{"TX_SEG_SIZE":"32k","RNDV_THRESH":"16k","MM_SEG_SIZE":"16k"}}`)}); err != nil {
		t.Fatal(err)
	}
}

// Blanks around list elements are dropped before UCX sees the list.
func TestListsNormalized(t *testing.T) {
	tr := ucx.New()
	defer tr.Close(context.Background())
	if _, err := tr.Init(context.Background(), plugins.InitRequest{Hostname: "127.0.0.1", Options: []byte(`{"tls":" tcp , cma ","net_devices":"lo, memory"}`)}); err != nil {
		t.Fatal(err)
	}
	if got := resourceNames(tr.Resources()); got != "cma/memory,tcp/lo" && got != "tcp/lo,cma/memory" {
		t.Fatalf("resources %s", got)
	}
}

func resourceNames(rs []ucxlib.Resource) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = r.String()
	}
	return strings.Join(s, ",")
}

func TestNetDevicesFromDeviceName(t *testing.T) {
	for in, want := range map[string]string{
		"":                    "",
		"mlx5_0":              "mlx5_0:1",
		"mlx5_0,mlx5_1":       "mlx5_0:1,mlx5_1:1",
		" mlx5_0 , ,mlx5_1:2": "mlx5_0:1,mlx5_1:2",
		"lo":                  "lo",
		"all":                 "all",
	} {
		if got := ucx.NetDevicesFromDeviceName(in); got != want {
			t.Errorf("%q -> %q, want %q", in, got, want)
		}
	}
}

// device_name reaches UCX_NET_DEVICES: "lo" restricts the tcp lanes to
// loopback.
func TestDeviceNameSelectsDevice(t *testing.T) {
	tr := ucx.New()
	defer tr.Close(context.Background())
	res, err := tr.Init(context.Background(), plugins.InitRequest{Hostname: "127.0.0.1", DeviceName: "lo", Options: []byte(`{"tls":"tcp","thread_mode":"multi"}`)})
	if err != nil {
		t.Fatal(err)
	}
	got := tr.Resources()
	if len(got) != 1 || got[0].Transport != "tcp" || got[0].Device != "lo" {
		t.Fatalf("resources %v, want just tcp/lo", got)
	}
	if !strings.Contains(res.Summary, "tcp/lo") {
		t.Fatalf("summary %q does not say which lanes", res.Summary)
	}
}

// A device_name (or net_devices) naming no device UCX can use: UCX only
// warns and starts with shared-memory lanes, which would reach no other
// host. Init fails at probe devices naming the device and listing this
// host's network devices; with lanes that are shared memory by choice it
// starts.
func TestDeviceNameUnusableIsDiagnosed(t *testing.T) {
	for _, c := range []struct{ device, opts string }{
		{"mlx5_0", `{}`},
		{"eth9", `{}`},
		{"", `{"net_devices":"mlx5_7:1"}`},
	} {
		ie := initErr(t, ucx.New(), plugins.InitRequest{DeviceName: c.device, Options: []byte(c.opts)})
		if ie.Step != plugins.StepProbeDevices || !errors.Is(ie, plugins.ErrUnavailable) ||
			!strings.Contains(ie.Cause, "none of the network devices asked for") || !strings.Contains(ie.Cause, "lo") {
			t.Errorf("device_name %q, options %s: %+v", c.device, c.opts, ie)
		}
		t.Log(ie)
	}
	tr := ucx.New()
	defer tr.Close(context.Background())
	if _, err := tr.Init(context.Background(), plugins.InitRequest{Hostname: "127.0.0.1", DeviceName: "mlx5_0", Options: []byte(`{"tls":"sm"}`)}); err != nil {
		t.Errorf("shared-memory lanes by choice, device_name mlx5_0: %v", err)
	}
}

// The rdma transport is this transport with RDMA lanes and a check that
// UCX selected one: on a host without RDMA either UCX finds no device for
// the RDMA lanes, or (lanes widened to tcp) the check is the diagnosis.
func TestVariantRequire(t *testing.T) {
	ie := initErr(t, ucxpath.New(ucxpath.Variant{Name: "rdmalike", DefaultTLS: ucxpath.RDMALanes, Require: ucxpath.RequireRDMA}), plugins.InitRequest{})
	if ie.Transport != "rdmalike" || ie.Step != plugins.StepProbeDevices || !errors.Is(ie, plugins.ErrUnavailable) || ie.NativeName != "UCS_ERR_NO_DEVICE" {
		t.Fatalf("RDMA lanes on a host without RDMA: %+v", ie)
	}
	ie = initErr(t, ucxpath.New(ucxpath.Variant{Name: "rdmalike", DefaultTLS: "tcp", Require: ucxpath.RequireRDMA}), plugins.InitRequest{})
	if ie.Step != plugins.StepProbeDevices || !errors.Is(ie, plugins.ErrUnavailable) || !strings.Contains(ie.Cause, "no RDMA lane") || !strings.Contains(ie.Cause, "tcp/") {
		t.Fatalf("tcp lanes with the RDMA check: %+v", ie)
	}
	// Without a Require, DefaultTLS applies when the option is empty.
	tr := ucxpath.New(ucxpath.Variant{Name: "tcponly", DefaultTLS: "tcp"})
	defer tr.Close(context.Background())
	if _, err := tr.Init(context.Background(), plugins.InitRequest{Hostname: "127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	for _, r := range tr.Resources() {
		if r.Transport != "tcp" {
			t.Fatalf("DefaultTLS tcp not applied: %v", tr.Resources())
		}
	}
	if info, _ := tr.Info(context.Background()); info.Name != "tcponly" {
		t.Fatalf("Info name %q", info.Name)
	}
}

func TestSharedMemoryCapability(t *testing.T) {
	for tls, want := range map[string]bool{"sm": true, "posix,cma": true, "tcp": false, "tcp,cma": false} {
		tr := ucx.New()
		if _, err := tr.Init(context.Background(), plugins.InitRequest{Hostname: "127.0.0.1", Options: options(t, tls)}); err != nil {
			t.Fatal(err)
		}
		info, _ := tr.Info(context.Background())
		if got := info.Capabilities&plugins.CapSameHostOnly != 0; got != want {
			t.Errorf("tls=%s: CapSameHostOnly=%v, want %v", tls, got, want)
		}
		tr.Close(context.Background())
	}
}

// The target's user code does nothing after registering; over UCX's tcp
// lanes PUT and GET are active messages the target must process, so they
// complete only because its progress thread runs on its own.
func TestIdleTargetProgresses(t *testing.T) {
	for _, tls := range []string{"tcp", "sm"} {
		t.Run(tls, func(t *testing.T) {
			h := transporttest.Harness{New: func(t *testing.T) plugins.Transport { return ucx.New() }, Options: options(t, tls)}
			a, b := transporttest.NewNode(t, h, "a"), transporttest.NewNode(t, h, "b")
			src := a.Alloc(t, 1<<20, 0)
			dst := b.Alloc(t, 1<<20, 0)
			peer := a.Connect(t, b)
			lanes, err := a.T.(*ucx.Transport).Lanes(peer)
			if err != nil || len(lanes) == 0 {
				t.Fatalf("lanes: %v %v", lanes, err)
			}
			t.Logf("lanes to the peer: %v", lanes)
			if tls == "tcp" && lanes[0].Transport != "tcp" {
				t.Fatalf("lanes %v: want tcp", lanes)
			}
			time.Sleep(100 * time.Millisecond) // b is idle: its loop sleeps on the worker's event fd
			transporttest.Fill(dst.Bytes, 1)
			a.MustTransfer(t, peer, []plugins.Op{{Kind: plugins.OpRead, LocalRegion: src.ID, RemoteRegion: dst.ID, Length: 1 << 20}})
			if !bytes.Equal(src.Bytes, dst.Bytes) {
				t.Fatal("GET from an idle target returned wrong data")
			}
			transporttest.Fill(src.Bytes, 2)
			a.MustTransfer(t, peer, []plugins.Op{{Kind: plugins.OpWrite, LocalRegion: src.ID, RemoteRegion: dst.ID, Length: 1 << 20}})
			if !bytes.Equal(src.Bytes, dst.Bytes) {
				t.Fatal("PUT to an idle target did not land")
			}
		})
	}
}

// Idle transports sleep on the worker's event fd instead of polling: the
// loop thread of each (initiator and target) is blocked in epoll_wait
// with no timeout on an epoll set holding the UCX worker's event fd (an
// epoll fd itself) and its wake-up eventfd. A state, read from /proc, not
// a CPU share, which depends on the machine.
func TestIdleDoesNotSpin(t *testing.T) {
	h := transporttest.Harness{New: func(t *testing.T) plugins.Transport { return ucx.New() }, Options: options(t, "tcp")}
	a, b := transporttest.NewNode(t, h, "a"), transporttest.NewNode(t, h, "b")
	src, dst := a.Alloc(t, 4096, 0), b.Alloc(t, 4096, 0)
	peer := a.Connect(t, b)
	a.MustTransfer(t, peer, []plugins.Op{{Kind: plugins.OpWrite, LocalRegion: src.ID, RemoteRegion: dst.ID, Length: 4096}})
	testbin.Eventually(t, "both transports' loops to sleep in epoll_wait with no timeout on their worker's event fd", func() bool {
		return sleepingLoops(t) >= 2
	})
}

// sleepingLoops counts this process's threads blocked in epoll_wait or
// epoll_pwait with no timeout on an epoll set of two fds, one of them an
// epoll fd (a UCX worker's event fd) and the other the loop's wake-up
// eventfd: the transports' loops, not Go's netpoller or UCX's own
// threads.
func sleepingLoops(t *testing.T) int {
	waits := map[string][2]int{"amd64": {232, 281}, "arm64": {-1, 22}}[runtime.GOARCH]
	if waits == [2]int{} {
		t.Skipf("no epoll_wait syscall numbers for %s", runtime.GOARCH)
	}
	n := 0
	for _, th := range testbin.Blocked(t, os.Getpid()) {
		// epoll_wait(epfd, events, maxevents, timeout): timeout -1 as an
		// int, whatever the width the caller's register holds it in.
		if (th.Nr != waits[0] && th.Nr != waits[1]) || int32(th.Args[3]) != -1 {
			continue
		}
		info, err := os.ReadFile(fmt.Sprintf("/proc/self/fdinfo/%d", th.Args[0]))
		if err != nil {
			continue
		}
		var watched, epolls int
		for _, line := range strings.Split(string(info), "\n") {
			f := strings.Fields(line)
			if len(f) < 2 || f[0] != "tfd:" {
				continue
			}
			watched++
			if target, _ := os.Readlink("/proc/self/fd/" + f[1]); target == "anon_inode:[eventpoll]" {
				epolls++
			}
		}
		if watched == 2 && epolls == 1 {
			n++
		}
	}
	return n
}

// A descriptor fetched before the peer deregistered a region must not
// reach that memory: the peer's welcome lists its live regions.
func TestStaleDescriptor(t *testing.T) {
	for _, tls := range []string{"tcp", "sm"} {
		t.Run(tls, func(t *testing.T) {
			h := transporttest.Harness{New: func(t *testing.T) plugins.Transport { return ucx.New() }, Options: options(t, tls)}
			a, b := transporttest.NewNode(t, h, "a"), transporttest.NewNode(t, h, "b")
			src := a.Alloc(t, 4096, 0)
			keep := b.Alloc(t, 4096, 0)
			gone := b.Alloc(t, 4096, 0)
			stale := b.Info()
			b.Free(t, gone) // deregistered and unmapped before a ever connects
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			peer, err := a.T.Connect(ctx, stale)
			if err != nil {
				t.Fatal(err)
			}
			res, _ := a.Transfer(t, peer, []plugins.Op{
				{Kind: plugins.OpWrite, LocalRegion: src.ID, RemoteRegion: gone.ID, Length: 4096},
				{Kind: plugins.OpWrite, LocalRegion: src.ID, RemoteRegion: keep.ID, Length: 4096},
			})
			if !errors.Is(res[0].Err, plugins.ErrUnknownRegion) {
				t.Fatalf("WRITE to a region deregistered before Connect: %v, want ErrUnknownRegion", res[0].Err)
			}
			if res[1].Err != nil {
				t.Fatalf("WRITE to a live region: %v", res[1].Err)
			}
		})
	}
}

// Connecting to an endpoint nobody serves fails within connect_timeout.
func TestConnectToClosedPeer(t *testing.T) {
	h := transporttest.Harness{New: func(t *testing.T) plugins.Transport { return ucx.New() },
		Options: []byte(`{"tls":"tcp","connect_timeout":"2s"}`)}
	a, b := transporttest.NewNode(t, h, "a"), transporttest.NewNode(t, h, "b")
	info := b.Info()
	if err := b.T.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err := a.T.Connect(context.Background(), info)
	if !errors.Is(err, plugins.ErrPeerUnreachable) || time.Since(start) > 2*time.Second+10*time.Second { // a hang bound
		t.Fatalf("Connect to a closed peer: %v after %v, want ErrPeerUnreachable within connect_timeout", err, time.Since(start))
	}
	if _, err := a.T.Connect(context.Background(), plugins.PeerInfo{Name: "x", Endpoint: []byte("127.0.0.1:1")}); !errors.Is(err, plugins.ErrInvalidArgument) {
		t.Fatalf("tcp-style endpoint: %v, want ErrInvalidArgument", err)
	}
}

// Disconnect ends a peer: later batches fail with ErrUnknownPeer, and the
// shared endpoint still serves a second Connect to the same node.
func TestDisconnectAndReconnect(t *testing.T) {
	h := transporttest.Harness{New: func(t *testing.T) plugins.Transport { return ucx.New() }, Options: options(t, "tcp")}
	a, b := transporttest.NewNode(t, h, "a"), transporttest.NewNode(t, h, "b")
	src, dst := a.Alloc(t, 4096, 0), b.Alloc(t, 4096, 0)
	op := []plugins.Op{{Kind: plugins.OpWrite, LocalRegion: src.ID, RemoteRegion: dst.ID, Length: 4096}}
	p1 := a.Connect(t, b)
	p2 := a.Connect(t, b)
	// b connects back to a: the same pair of workers in both roles.
	back := b.Connect(t, a)
	a.MustTransfer(t, p1, op)
	if err := a.T.Disconnect(context.Background(), p1); err != nil {
		t.Fatal(err)
	}
	res, err := a.Transfer(t, p1, op)
	if !errors.Is(err, plugins.ErrUnknownPeer) || !errors.Is(res[0].Err, plugins.ErrUnknownPeer) {
		t.Fatalf("after Disconnect: %v / %v", err, res[0].Err)
	}
	a.MustTransfer(t, p2, op)
	b.MustTransfer(t, back, []plugins.Op{{Kind: plugins.OpRead, LocalRegion: dst.ID, RemoteRegion: src.ID, Length: 4096}})
	// b deregisters the region while a still holds a peer to it.
	b.Free(t, dst)
	if res, _ := a.Transfer(t, p2, op); !errors.Is(res[0].Err, plugins.ErrUnknownRegion) {
		t.Fatalf("after the peer deregistered: %v", res[0].Err)
	}
}

// A peer in this host's pid namespace is reached over shared memory even
// when tcp lanes are allowed too: UCX 1.13 carries RMA over the lane that
// carries active messages, and with peer error handling that would be tcp.
// Forcing error_mode peer shows the difference.
func TestSameHostPrefersSharedMemory(t *testing.T) {
	for _, c := range []struct {
		opts   string
		wantAM string
	}{
		{`{"tls":"sm,tcp"}`, "shm"},
		{`{}`, "shm"}, // UCX's default: every transport
		{`{"tls":"sm,tcp","error_mode":"peer"}`, "tcp"},
	} {
		h := transporttest.Harness{New: func(t *testing.T) plugins.Transport { return ucx.New() }, Options: []byte(c.opts)}
		a, b := transporttest.NewNode(t, h, "a"), transporttest.NewNode(t, h, "b")
		src, dst := a.Alloc(t, 4096, 0), b.Alloc(t, 4096, 0)
		peer := a.Connect(t, b)
		a.MustTransfer(t, peer, []plugins.Op{{Kind: plugins.OpWrite, LocalRegion: src.ID, RemoteRegion: dst.ID, Length: 4096}})
		lanes, err := a.T.(*ucx.Transport).Lanes(peer)
		if err != nil {
			t.Fatal(err)
		}
		am := ""
		for _, l := range lanes {
			for _, u := range l.Uses {
				if u == "am" {
					am = l.Transport
				}
			}
		}
		got := am
		if am == "posix" || am == "sysv" {
			got = "shm"
		}
		t.Logf("%s: lanes %v", c.opts, lanes)
		if got != c.wantAM {
			t.Errorf("%s: active messages (and so RMA) over %q, want %s", c.opts, am, c.wantAM)
		}
	}
}
