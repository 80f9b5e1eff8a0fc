package rdma

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/kvconnect/kvconnect/plugins"
)

func initOptions(t *testing.T, fx, extra string) []byte {
	sys, dev := fixture(t, fx)
	return fmt.Appendf(nil, `{"sysfs_root":%q,"dev_root":%q%s}`, sys, dev, extra)
}

func TestInitReturnsTheDiagnosis(t *testing.T) {
	tr := New()
	tr.loader, tr.memlock, tr.lookupEnv = listed("mlx5_0"), unlimited, noEnv
	_, err := tr.Init(context.Background(), plugins.InitRequest{Options: initOptions(t, "ib-port-down", `,"ib_port":1,"gid_index":-1,"min_memlock":"1GiB"`)})
	var ie *plugins.InitError
	if !errors.As(err, &ie) || ie.Step != plugins.StepOpenDevice || !strings.Contains(ie.Cause, "mlx5_0 port 1 is not ACTIVE") {
		t.Fatalf("Init = %v", err)
	}
	// min_memlock decodes from a size string and is applied.
	tr = New()
	tr.loader, tr.memlock, tr.lookupEnv = listed("mlx5_0", "mlx5_1"), func() Memlock { return Memlock{Soft: 512 << 20, Hard: 512 << 20} }, noEnv
	_, err = tr.Init(context.Background(), plugins.InitRequest{Options: initOptions(t, "ib-healthy", `,"min_memlock":"1GiB"`)})
	if !errors.As(err, &ie) || ie.Step != plugins.StepRegisterMemory || !strings.Contains(ie.Cause, "RLIMIT_MEMLOCK is 512MiB") {
		t.Fatalf("Init = %v", err)
	}
}

func TestInitOptionErrors(t *testing.T) {
	for _, c := range []struct {
		opts string
		want string
	}{
		{`{"gid_idx": 3}`, `unknown option transports.rdma.gid_idx (did you mean "gid_index"?)`},
		{`{"gid_index": "three"}`, "transports.rdma.gid_index"},
		{`{"gid_index": -5}`, "transports.rdma.gid_index = -5: must be -1 (auto) or a GID table index from 0 to 255"},
		{`{"ib_port": 0}`, "transports.rdma.ib_port = 0: must be a port number from 1 to 255"},
		{`{"min_memlock": "lots"}`, "transports.rdma.min_memlock"},
		{`{"sysfs_root": ""}`, "transports.rdma.sysfs_root"},
		{`[1]`, "options must be a JSON object"},
		// The data path's options: RDMA lanes only, the ucx transport's
		// checks under rdma's names, all before the preflight.
		{`{"tls": "tcp"}`, `transports.rdma.tls = "tcp": "tcp" is not an RDMA transport: the rdma transport uses RDMA lanes only`},
		{`{"tls": "rc,sm"}`, `"sm" is not an RDMA transport`},
		{`{"tls": "^rc"}`, `"^rc" is not an RDMA transport`},
		{`{"tls": "rc,,ud"}`, `"" is not an RDMA transport`},
		{`{"thread_mode": "parallel"}`, `transports.rdma.thread_mode = "parallel": must be single, serialized or multi`},
		{`{"error_mode": "strict"}`, `transports.rdma.error_mode = "strict"`},
		{`{"max_inflight": 0}`, "transports.rdma.max_inflight = 0: must be between 1 and 65536"},
		{`{"op_timeout": "-1s"}`, "transports.rdma.op_timeout"},
		{`{"connect_timeout": "soon"}`, "transports.rdma.connect_timeout"},
		{`{"net_devices": "mlx5_0:1 mlx5_1:1"}`, "transports.rdma.net_devices"},
		{`{"ucx_config": {"UCX_RNDV_THRESH": "16k"}}`, "transports.rdma.ucx_config.UCX_RNDV_THRESH"},
		{`{"ucx_config": {"TLS": "tcp"}}`, "set transports.rdma.tls instead"},
		{`{"testing_unsafe_tcp_lane": true}`, `unknown option transports.rdma.testing_unsafe_tcp_lane (did you mean "testing_unsafe_tcp_lanes"?)`},
		{`{"testing_unsafe_tcp_lanes": "true"}`, `transports.rdma.testing_unsafe_tcp_lanes = "true": want bool`},
		{`{"testing_unsafe_tcp_lanes": 1}`, "transports.rdma.testing_unsafe_tcp_lanes = 1: want bool"},
	} {
		tr := New()
		tr.loader = notCalled(t)
		tr.lookupEnv = noEnv
		_, err := tr.Init(context.Background(), plugins.InitRequest{Options: []byte(c.opts)})
		var ie *plugins.InitError
		if !errors.As(err, &ie) || ie.Step != plugins.StepConfigure || !errors.Is(err, plugins.ErrInvalidArgument) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Init = %v, want a configure error with %q", c.opts, err, c.want)
		}
	}
}

// notCalled is a loader for tests whose Init must fail before the
// preflight.
func notCalled(t *testing.T) Loader {
	return func(context.Context) Library {
		t.Errorf("the preflight ran; the options should have been refused first")
		return Library{}
	}
}

func noEnv(string) (string, bool) { return "", false }

func env(vars ...string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		for _, kv := range vars {
			if k, v, _ := strings.Cut(kv, "="); k == name {
				return v, v != ""
			}
		}
		return "", false
	}
}

// The test-only option needs two keys: the option, exactly true, and
// AllowTestingEnv=1 in the environment. Every other combination is a
// configuration error, before the preflight runs.
func TestTestingOptionGuard(t *testing.T) {
	for _, c := range []struct {
		name string
		opts string
		env  []string
		want string
	}{
		{"option without the variable", `{"testing_unsafe_tcp_lanes": true}`, nil,
			"transports.rdma.testing_unsafe_tcp_lanes = true: is a test-only option (it runs the rdma transport over UCX's tcp lanes, not RDMA) and is refused unless KVCONNECT_ALLOW_TESTING_OPTIONS=1 is also set"},
		{"variable not 1", `{"testing_unsafe_tcp_lanes": true}`, []string{"KVCONNECT_ALLOW_TESTING_OPTIONS=true"},
			`KVCONNECT_ALLOW_TESTING_OPTIONS="true": must be exactly 1 to allow transports.rdma.testing_unsafe_tcp_lanes`},
		{"variable without the option", `{}`, []string{"KVCONNECT_ALLOW_TESTING_OPTIONS=1"},
			`KVCONNECT_ALLOW_TESTING_OPTIONS="1" is set in the environment but transports.rdma.testing_unsafe_tcp_lanes is not true`},
		{"variable with the option false", `{"testing_unsafe_tcp_lanes": false}`, []string{"KVCONNECT_ALLOW_TESTING_OPTIONS=1"},
			"is set in the environment but transports.rdma.testing_unsafe_tcp_lanes is not true"},
		{"variable without options", ``, []string{"KVCONNECT_ALLOW_TESTING_OPTIONS=1"},
			"is set in the environment but transports.rdma.testing_unsafe_tcp_lanes is not true"},
		{"other keys do not unlock it", `{"testing_unsafe_tcp_lanes": true}`, []string{"KVCONNECT_ALLOW_TESTING=1", "KVCONNECT_TESTING=1"},
			"refused unless KVCONNECT_ALLOW_TESTING_OPTIONS=1 is also set"},
		{"with tls", `{"testing_unsafe_tcp_lanes": true, "tls": "rc"}`, []string{"KVCONNECT_ALLOW_TESTING_OPTIONS=1"},
			`transports.rdma.tls = "rc": cannot be combined with transports.rdma.testing_unsafe_tcp_lanes`},
	} {
		t.Run(c.name, func(t *testing.T) {
			tr := New()
			tr.loader, tr.lookupEnv = notCalled(t), env(c.env...)
			_, err := tr.Init(context.Background(), plugins.InitRequest{Options: []byte(c.opts)})
			var ie *plugins.InitError
			if !errors.As(err, &ie) || ie.Step != plugins.StepConfigure || !errors.Is(err, plugins.ErrInvalidArgument) ||
				errors.Is(err, plugins.ErrUnavailable) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Init = %v, want a configure error (not ErrUnavailable) with %q", err, c.want)
			}
			if _, err := tr.dataPath(); !errors.Is(err, plugins.ErrNotInitialized) {
				t.Errorf("after a refused Init: %v", err)
			}
		})
	}
	// Both keys: accepted (what happens next is the data path's business,
	// tested in the conformance suite).
	o := DefaultOptions()
	o.TestingUnsafeTCPLanes = true
	if on, err := o.checkTesting(env("KVCONNECT_ALLOW_TESTING_OPTIONS=1")); !on || err != nil {
		t.Fatalf("both keys: %v, %v", on, err)
	}
	// Neither: off.
	if on, err := DefaultOptions().checkTesting(noEnv); on || err != nil {
		t.Fatalf("neither key: %v, %v", on, err)
	}
}

func TestNetDevices(t *testing.T) {
	for _, c := range []struct {
		deviceName string
		port       int
		want       string
		devices    []string
	}{
		{"", 1, "", nil},
		{"mlx5_0", 1, "mlx5_0:1", []string{"mlx5_0"}},
		{"mlx5_0,mlx5_1", 1, "mlx5_0:1,mlx5_1:1", []string{"mlx5_0", "mlx5_1"}},
		{" mlx5_1 , mlx5_0 ,", 1, "mlx5_1:1,mlx5_0:1", []string{"mlx5_1", "mlx5_0"}},
		{"mlx5_0", 2, "mlx5_0:2", []string{"mlx5_0"}},
		{"mlx5_0:2,mlx5_1", 2, "mlx5_0:2,mlx5_1:2", []string{"mlx5_0", "mlx5_1"}},
		{"mlx5_0:1", 1, "mlx5_0:1", []string{"mlx5_0"}},
		{"mlx5_0,mlx5_0:1", 1, "mlx5_0:1", []string{"mlx5_0"}},
		{"bnxt_re0,irdma1", 1, "bnxt_re0:1,irdma1:1", []string{"bnxt_re0", "irdma1"}},
	} {
		got, err := NetDevices(c.deviceName, c.port)
		if err != nil || got != c.want {
			t.Errorf("NetDevices(%q, %d) = %q, %v; want %q", c.deviceName, c.port, got, err, c.want)
		}
		devs, _, _ := devicePorts(c.deviceName, c.port)
		if strings.Join(devs, ",") != strings.Join(c.devices, ",") {
			t.Errorf("devicePorts(%q) preflight devices %q, want %q", c.deviceName, devs, c.devices)
		}
	}
	for _, c := range []struct {
		deviceName string
		port       int
		want       string
	}{
		{"mlx5_0:2", 1, `device_name "mlx5_0:2" names port 2 of mlx5_0 but transports.rdma.ib_port (MC_IB_PORT) is 1, the port the preflight checks: set ib_port to 2 or drop the port from device_name`},
		{"mlx5_0:1,mlx5_1:2", 1, "names port 2 of mlx5_1"},
		{"mlx5_0:x", 1, `"mlx5_0:x" is not an RDMA device with a port`},
		{":1", 1, `":1" is not an RDMA device with a port`},
		{"mlx5_0:0", 1, "is not an RDMA device with a port"},
		{`{"0": "mlx5_0"}`, 1, "is a per-device map"},
		{"mlx5_0/1", 1, "is not an RDMA device name"},
	} {
		_, err := NetDevices(c.deviceName, c.port)
		if !errors.Is(err, plugins.ErrInvalidArgument) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("NetDevices(%q, %d) = %v, want ErrInvalidArgument with %q", c.deviceName, c.port, err, c.want)
		}
	}
	// Through Init: a configuration error before the preflight.
	tr := New()
	tr.loader, tr.lookupEnv = notCalled(t), noEnv
	_, err := tr.Init(context.Background(), plugins.InitRequest{DeviceName: "mlx5_0:2"})
	var ie *plugins.InitError
	if !errors.As(err, &ie) || ie.Step != plugins.StepConfigure || !errors.Is(err, plugins.ErrInvalidArgument) {
		t.Fatalf("Init = %v", err)
	}
}

// ucxOptions carries the data-path options to the UCX variant, and an
// explicit gid_index (MC_GID_INDEX) becomes UCX's GID_INDEX.
func TestUCXOptions(t *testing.T) {
	o := DefaultOptions()
	o.ThreadMode, o.MaxInflight = "multi", 64
	o.UCXConfig = map[string]string{"RNDV_THRESH": "16k"}
	u := o.ucxOptions("rc,ud,dc", "mlx5_0:1", false)
	if u.TLS != "rc,ud,dc" || u.NetDevices != "mlx5_0:1" || u.ThreadMode != "multi" || u.MaxInflight != 64 ||
		u.ErrorMode != "auto" || u.UCXConfig["RNDV_THRESH"] != "16k" || u.UCXConfig["GID_INDEX"] != "" {
		t.Fatalf("%+v", u)
	}
	o.GIDIndex = 3
	if u := o.ucxOptions("rc,ud", "", false); u.UCXConfig["GID_INDEX"] != "3" || len(o.UCXConfig) != 1 {
		t.Fatalf("gid_index 3: %+v (options' map changed: %v)", u.UCXConfig, o.UCXConfig)
	}
	o.UCXConfig = map[string]string{"GID_INDEX": "1"}
	if u := o.ucxOptions("rc,ud", "", false); u.UCXConfig["GID_INDEX"] != "1" {
		t.Fatalf("ucx_config's GID_INDEX wins: %+v", u.UCXConfig)
	}
	o.UCXConfig = nil
	if u := o.ucxOptions("tcp", "", true); u.UCXConfig != nil {
		t.Fatalf("the test-only tcp lanes get no GID_INDEX: %+v", u.UCXConfig)
	}
	for tls, want := range map[string]string{"": "rc,ud", " rc , dc ": "rc,dc", "ib": "ib", "rc_x,ud_mlx5:aux": "rc_x,ud_mlx5:aux", "dc_mlx5": "dc_mlx5"} {
		o := DefaultOptions()
		o.TLS = tls
		if got, err := o.lanes(false); got != want || err != nil {
			t.Errorf("tls %q: %q, %v; want %q", tls, got, err, want)
		}
	}
	if got, err := DefaultOptions().lanes(true); got != "tcp" || err != nil {
		t.Errorf("testing lanes: %q, %v", got, err)
	}
}

func TestNoDataPath(t *testing.T) {
	ctx := context.Background()
	tr := New()
	info, err := tr.Info(ctx)
	if err != nil || info.Name != "rdma" || info.APIVersion != plugins.APIVersion {
		t.Fatalf("Info = %+v, %v", info, err)
	}
	results := make([]plugins.OpResult, 2)
	calls := map[string]func() error{
		"RegisterRegion":   func() error { _, err := tr.RegisterRegion(ctx, plugins.Region{ID: 1}); return err },
		"DeregisterRegion": func() error { return tr.DeregisterRegion(ctx, 1) },
		"Connect":          func() error { _, err := tr.Connect(ctx, plugins.PeerInfo{Name: "p"}); return err },
		"Disconnect":       func() error { return tr.Disconnect(ctx, 1) },
		"Transfer":         func() error { return tr.Transfer(ctx, 1, make([]plugins.Op, 2), results) },
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, plugins.ErrNotInitialized) {
			t.Errorf("%s before Init: %v, want ErrNotInitialized", name, err)
		}
	}
	for i, r := range results {
		if !errors.Is(r.Err, plugins.ErrNotInitialized) {
			t.Errorf("result %d: %v", i, r.Err)
		}
	}
	tr.loader, tr.lookupEnv = listed(), noEnv
	if _, err := tr.Init(ctx, plugins.InitRequest{}); !errors.Is(err, plugins.ErrUnavailable) {
		t.Fatalf("Init: %v", err)
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, plugins.ErrNotInitialized) {
			t.Errorf("%s after a failed Init: %v, want ErrNotInitialized", name, err)
		}
	}
	if err := tr.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := tr.Close(ctx); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, plugins.ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", name, err)
		}
	}
	if _, err := tr.Init(ctx, plugins.InitRequest{}); !errors.Is(err, plugins.ErrClosed) {
		t.Errorf("Init after Close: %v", err)
	}
}
