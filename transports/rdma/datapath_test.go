//go:build linux && cgo

package rdma

import (
	"context"
	"errors"
	"strings"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/kvconnect/kvconnect/plugins"
)

// When the preflight passes (fixture trees of healthy hosts, with only the
// library's device list simulated) the real UCX of this machine, which has
// its ib module but no RDMA device, selects no RDMA lane: Init fails with
// that diagnosis, naming the devices the preflight passed, the lanes and
// net devices asked for and what UCX does offer.
func TestInitPreflightPassedNoRDMALane(t *testing.T) {
	for _, c := range []struct {
		name, fx, device, opts string
		loader                 Loader
		want                   []string
		notWant                string
	}{
		{"every device", "ib-healthy", "", "", listed("mlx5_0", "mlx5_1"), []string{
			"the RDMA preflight passed (mlx5_0 (port 1 ACTIVE, InfiniBand, GID index 0 fe80::c42:a103:b4:5e20), mlx5_1 (port 1 ACTIVE, InfiniBand, GID index 0 fe80::c42:a103:b4:5e38)) but UCX selected no RDMA lane: ",
			`UCX found no usable transport for tls="rc,ud" net_devices=""`,
			"this host offers ", "tcp/lo",
		}, ""},
		{"one device with its port", "ib-healthy", "mlx5_1:1", "", listed("mlx5_0", "mlx5_1"), []string{
			"the RDMA preflight passed (mlx5_1 (port 1 ACTIVE, InfiniBand",
			`UCX found no usable transport for tls="rc,ud" net_devices="mlx5_1:1"`,
		}, "mlx5_0"},
		{"RoCE, dc, gid_index", "roce-healthy", "mlx5_0", `,"tls":"rc,ud,dc","gid_index":3,"thread_mode":"multi"`, listed("mlx5_0"), []string{
			"the RDMA preflight passed (mlx5_0 (port 1 ACTIVE, Ethernet, GID index 3 ::ffff:10.0.10.7))",
			`tls="rc,ud,dc" net_devices="mlx5_0:1"`,
		}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			tr := New()
			tr.loader, tr.memlock, tr.lookupEnv = c.loader, unlimited, noEnv
			defer tr.Close(context.Background())
			_, err := tr.Init(context.Background(), plugins.InitRequest{Hostname: "127.0.0.1", Protocol: "rdma", DeviceName: c.device,
				Options: initOptions(t, c.fx, c.opts), Logger: zaptest.NewLogger(t)})
			var ie *plugins.InitError
			if !errors.As(err, &ie) || !errors.Is(err, plugins.ErrUnavailable) || errors.Is(err, plugins.ErrInvalidArgument) {
				t.Fatalf("Init = %v, want an InitError wrapping ErrUnavailable", err)
			}
			t.Logf("diagnosis: %v\nhints: %q", err, ie.Hints)
			if ie.Transport != "rdma" || ie.Step != plugins.StepProbeDevices || ie.NativeName != "UCS_ERR_NO_DEVICE" || ie.NativeCode != -14 {
				t.Errorf("%+v", ie)
			}
			for _, w := range c.want {
				if !strings.Contains(ie.Cause, w) {
					t.Errorf("cause lacks %q:\n%s", w, ie.Cause)
				}
			}
			if c.notWant != "" && strings.Contains(ie.Cause, c.notWant) {
				t.Errorf("cause names %s: %s", c.notWant, ie.Cause)
			}
			hints := strings.Join(ie.Hints, "\n")
			for _, w := range []string{"ucx_info -d", "without verbs/mlx5 support", "ibverbs-providers", "rdma-core",
				"UCX names RDMA devices <device>:<port>", "replaces UCX_TLS", "fallback list"} {
				if !strings.Contains(hints, w) {
					t.Errorf("hints lack %q: %q", w, ie.Hints)
				}
			}
			if _, err := tr.dataPath(); !errors.Is(err, plugins.ErrNotInitialized) {
				t.Errorf("no data path after the failure: %v", err)
			}
		})
	}
}

// A ucx_config name UCX would not apply is the ucx transport's
// configuration error, under rdma's name, after the preflight passed.
func TestInitUCXConfigChecked(t *testing.T) {
	tr := New()
	tr.loader, tr.memlock, tr.lookupEnv = listed("mlx5_0", "mlx5_1"), unlimited, noEnv
	defer tr.Close(context.Background())
	_, err := tr.Init(context.Background(), plugins.InitRequest{Options: initOptions(t, "ib-healthy", `,"ucx_config":{"RNDV_TRESH":"16k"}`)})
	var ie *plugins.InitError
	if !errors.As(err, &ie) || ie.Step != plugins.StepConfigure || !errors.Is(err, plugins.ErrInvalidArgument) ||
		!strings.Contains(err.Error(), "transports.rdma.ucx_config.RNDV_TRESH") || !strings.Contains(err.Error(), `did you mean "RNDV_THRESH"`) {
		t.Fatalf("Init = %v", err)
	}
}
