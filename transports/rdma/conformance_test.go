//go:build linux && cgo

package rdma_test

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/kvconnect/kvconnect/internal/testbin"
	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/plugins/transporttest"
	"github.com/kvconnect/kvconnect/transports/rdma"
)

// testingOptions turns on the test-only tcp lanes; the process running the
// transport also needs allowTesting in its environment.
// The lanes are held to loopback: other tests create and delete network
// interfaces (network namespaces' veth ends) while this suite runs, and a
// worker address naming one that is gone is unreachable.
var testingOptions = []byte(`{"testing_unsafe_tcp_lanes": true, "net_devices": "lo"}`)

const allowTesting = rdma.AllowTestingEnv + "=1"

// The rdma transport's data path (the UCX code it runs on RDMA hosts)
// passes the conformance suite over the test-only tcp lanes in process.
// Behind the plugin protocol that code is the ucx transport's, which
// make test runs over the same lanes in every mode; the rdma plugin
// binary starts in this package's plugin tests. The suite over in-memory
// gRPC and as the rdma plugin binary is TestConformancePlugins'.
func TestConformance(t *testing.T) {
	t.Setenv(rdma.AllowTestingEnv, "1")
	t.Run("InProcess", func(t *testing.T) {
		transporttest.Run(t, transporttest.Harness{New: transporttest.InProcess(newRDMA), Options: testingOptions})
	})
}

// TestConformancePlugins is TestConformance over in-memory gRPC and as the
// plugin binary.
func TestConformancePlugins(t *testing.T) {
	testbin.Long(t, "the conformance suite once more behind the plugin protocol")
	t.Setenv(rdma.AllowTestingEnv, "1")
	transporttest.RunModes(t, transporttest.Modes{
		New:     newRDMA,
		Binary:  testbin.MustBuild(t, "./cmd/kvconnect-transport-rdma", "kvconnect-transport-rdma"),
		Env:     []string{allowTesting},
		Options: testingOptions,
	})
}

func newRDMA() plugins.Transport { return rdma.New() }

// With the test-only lanes the transport is still "rdma", runs only on
// UCX's tcp lanes, and says loudly, in its summary and its log, that it is
// not RDMA; the preflight still runs and its verdict is reported.
func TestTestingLanesSayTheyAreNotRDMA(t *testing.T) {
	t.Setenv(rdma.AllowTestingEnv, "1")
	noRDMA, _ := hostHasNoRDMA(t)
	core, logs := observer.New(zapcore.InfoLevel)
	tr := rdma.New()
	defer tr.Close(context.Background())
	res, err := tr.Init(context.Background(), plugins.InitRequest{Hostname: "127.0.0.1", Protocol: "rdma", DeviceName: "mlx5_0",
		Options: testingOptions, Logger: zap.New(core)})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("summary: %s", res.Summary)
	if !strings.HasPrefix(res.Summary, "TESTING ONLY, NOT RDMA: the rdma transport runs over UCX's tcp lanes (transports.rdma.testing_unsafe_tcp_lanes): rdma (UCX ") ||
		!strings.Contains(res.Summary, "tls=tcp") || !strings.Contains(res.Summary, "; RDMA preflight ") {
		t.Errorf("summary: %s", res.Summary)
	}
	if noRDMA && !strings.Contains(res.Summary, "RDMA preflight failed (ignored): rdma: probe devices failed (ENOSYS 38)") {
		t.Errorf("summary lacks the preflight's ENOSYS verdict: %s", res.Summary)
	}
	rs := tr.Resources()
	if len(rs) == 0 {
		t.Fatal("no resources")
	}
	for _, r := range rs {
		if r.Transport != "tcp" {
			t.Errorf("resource %s on the test-only lanes", r)
		}
	}
	info, err := tr.Info(context.Background())
	if err != nil || info.Name != "rdma" || info.Version != rdma.Version || info.Capabilities&plugins.CapSameHostOnly != 0 {
		t.Errorf("Info = %+v, %v", info, err)
	}
	warned := 0
	for _, e := range logs.FilterLevelExact(zapcore.WarnLevel).All() {
		if strings.Contains(e.Message, "TESTING ONLY") {
			warned++
		}
	}
	if warned < 2 { // the option, and the transport up over tcp (plus the ignored preflight here)
		t.Errorf("want warnings that this is not RDMA; log: %v", logs.All())
	}
	if _, err := tr.Init(context.Background(), plugins.InitRequest{Options: testingOptions}); !errors.Is(err, plugins.ErrInvalidArgument) {
		t.Errorf("second Init: %v", err)
	}
}

// Through the plugin binary the guard reads the plugin process's own
// environment: the option alone, or the variable alone, is refused.
func TestPluginTestingOptionGuard(t *testing.T) {
	for _, c := range []struct {
		name, opts string
		env        []string
		want       string
	}{
		{"option alone", string(testingOptions), nil, "is refused unless KVCONNECT_ALLOW_TESTING_OPTIONS=1 is also set"},
		{"variable alone", `{}`, []string{allowTesting}, "is set in the environment but transports.rdma.testing_unsafe_tcp_lanes is not true"},
		{"variable not 1", string(testingOptions), []string{rdma.AllowTestingEnv + "=yes"}, "must be exactly 1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := launch(t, c.env...)
			_, err := p.Init(context.Background(), plugins.InitRequest{Protocol: "rdma", Options: []byte(c.opts)})
			var ie *plugins.InitError
			if !errors.As(err, &ie) || ie.Step != plugins.StepConfigure || !errors.Is(err, plugins.ErrInvalidArgument) ||
				errors.Is(err, plugins.ErrUnavailable) || !strings.Contains(ie.Cause, c.want) {
				t.Fatalf("Init = %v, want a configure error with %q", err, c.want)
			}
		})
	}
	// Both keys: up, and the summary crosses gRPC intact.
	p := launch(t, allowTesting)
	res, err := p.Init(context.Background(), plugins.InitRequest{Hostname: "127.0.0.1", Protocol: "rdma", Options: testingOptions})
	if err != nil || !strings.HasPrefix(res.Summary, "TESTING ONLY, NOT RDMA") {
		t.Fatalf("Init = %+v, %v", res, err)
	}
}

// Without the test-only option, this host's kernel without RDMA support
// stops Init at the preflight with the ENOSYS diagnosis, whatever the data
// path's options say: the data path is never reached.
func TestInitWithoutTestingOptionIsThePreflight(t *testing.T) {
	noRDMA, _ := hostHasNoRDMA(t)
	if !noRDMA {
		t.Skip("needs a host whose kernel has no RDMA support and a loadable libibverbs")
	}
	for _, opts := range []string{``, `{}`, `{"testing_unsafe_tcp_lanes": false}`, `{"tls": "rc,ud,dc", "thread_mode": "multi", "max_inflight": 64}`} {
		tr := rdma.New()
		_, err := tr.Init(context.Background(), plugins.InitRequest{Hostname: "127.0.0.1", Protocol: "rdma", Options: []byte(opts)})
		var ie *plugins.InitError
		if !errors.As(err, &ie) || !errors.Is(err, plugins.ErrUnavailable) || ie.Step != plugins.StepProbeDevices ||
			ie.NativeName != "ENOSYS" || ie.NativeCode != int64(syscall.ENOSYS) || !strings.Contains(ie.Cause, "ibv_get_device_list failed with ENOSYS") {
			t.Errorf("options %s: Init = %v, want the ENOSYS preflight diagnosis", opts, err)
		}
		if tr.Resources() != nil {
			t.Errorf("options %s: a data path after a failed preflight", opts)
		}
		if _, err := tr.Connect(context.Background(), plugins.PeerInfo{Name: "p"}); !errors.Is(err, plugins.ErrNotInitialized) {
			t.Errorf("Connect = %v", err)
		}
		tr.Close(context.Background())
	}
}
