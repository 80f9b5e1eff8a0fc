package rdma_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/kvconnect/kvconnect/internal/testbin"
	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/plugins/host"
	"github.com/kvconnect/kvconnect/transports/rdma"
)

func TestMain(m *testing.M) {
	testbin.Main(m)
}

func launch(t *testing.T, env ...string) *host.Plugin {
	t.Helper()
	bin, err := testbin.Build("./cmd/kvconnect-transport-rdma", "kvconnect-transport-rdma")
	if err != nil {
		t.Fatal(err)
	}
	p, err := host.Launch(context.Background(), host.LaunchConfig{Name: "rdma", Path: bin, Logger: zaptest.NewLogger(t),
		Env: env})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close(context.Background()) })
	return p
}

func initErr(t *testing.T, p *host.Plugin, opts string) *plugins.InitError {
	t.Helper()
	_, err := p.Init(context.Background(), plugins.InitRequest{Protocol: "rdma", Options: []byte(opts)})
	if !errors.Is(err, plugins.ErrUnavailable) {
		t.Fatalf("Init = %v, want an error wrapping ErrUnavailable", err)
	}
	var ie *plugins.InitError
	if !errors.As(err, &ie) {
		t.Fatalf("Init = %T %v, want *plugins.InitError", err, err)
	}
	if ie.Transport != "rdma" || ie.Cause == "" || len(ie.Hints) == 0 {
		t.Errorf("diagnosis incomplete: %+v", ie)
	}
	t.Logf("diagnosis across gRPC: %v\nhints: %q", ie, ie.Hints)
	return ie
}

// hostHasNoRDMA reports whether this host's kernel lacks RDMA support and
// libibverbs is loadable here, as on this project's machines. Then the
// real library, in a plugin process, fails with ENOSYS, and honours
// SYSFS_PATH (it falls back from RDMA netlink to sysfs), which lets the
// tests below point the real library at fixture trees.
func hostHasNoRDMA(t *testing.T) (bool, rdma.Library) {
	lib := rdma.LoadLibibverbs(context.Background())
	_, err := os.Stat("/sys/class/infiniband_verbs")
	return lib.Loaded && errors.Is(err, os.ErrNotExist), lib
}

// TestPluginRealLibrary starts the real plugin binary, whose Init runs the
// real libibverbs on this host, and checks the diagnosis arrives intact
// across the gRPC boundary.
func TestPluginRealLibrary(t *testing.T) {
	noRDMA, lib := hostHasNoRDMA(t)
	p := launch(t)
	info, err := p.Info(context.Background())
	if err != nil || info.Name != "rdma" {
		t.Fatalf("Info = %+v, %v", info, err)
	}
	ie := initErr(t, p, `{}`)
	switch {
	case lib.Unsupported != "":
		if ie.Step != plugins.StepLoadLibrary || !strings.Contains(ie.Cause, "cgo") {
			t.Errorf("no-cgo build: %+v", ie)
		}
	case !lib.Loaded:
		if ie.Step != plugins.StepLoadLibrary || !strings.Contains(ie.Cause, "cannot load libibverbs.so.1") {
			t.Errorf("libibverbs missing: %+v", ie)
		}
	case noRDMA:
		if ie.Step != plugins.StepProbeDevices || ie.NativeName != "ENOSYS" || ie.NativeCode != int64(syscall.ENOSYS) ||
			!strings.Contains(ie.Cause, "ibv_get_device_list failed with ENOSYS") {
			t.Errorf("want the ENOSYS diagnosis, got %+v", ie)
		}
		if !strings.Contains(strings.Join(ie.Hints, "\n"), "--device /dev/infiniband") {
			t.Errorf("hints: %q", ie.Hints)
		}
	default:
		t.Logf("this host has RDMA support; diagnosis: %v", ie)
	}
	// No data path across the boundary either.
	if _, err := p.Connect(context.Background(), plugins.PeerInfo{Name: "peer", Endpoint: []byte("x")}); !errors.Is(err, plugins.ErrNotInitialized) {
		t.Errorf("Connect = %v, want ErrNotInitialized", err)
	}
	if err := p.Close(context.Background()); err != nil {
		t.Errorf("Close: %v", err)
	}
}

// TestPluginRealLibraryOnFixtures points the real libibverbs in the plugin
// process at fixture sysfs trees (SYSFS_PATH) and the preflight at the
// same trees (sysfs_root).
func TestPluginRealLibraryOnFixtures(t *testing.T) {
	noRDMA, _ := hostHasNoRDMA(t)
	if !noRDMA {
		t.Skip("needs a host whose kernel has no RDMA support and a loadable libibverbs: only there does libibverbs read SYSFS_PATH")
	}
	if _, err := os.Stat("/dev/infiniband/uverbs0"); err == nil {
		t.Skip("/dev/infiniband/uverbs0 exists on this host")
	}
	abs := func(name string) string {
		a, err := filepath.Abs(filepath.Join("testdata", name, "sys"))
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	t.Run("HCA without ib_uverbs gives ENOSYS", func(t *testing.T) {
		sys := abs("no-uverbs-module")
		ie := initErr(t, launch(t, "SYSFS_PATH="+sys), fmt.Sprintf(`{"sysfs_root":%q}`, sys))
		if ie.Step != plugins.StepProbeDevices || ie.NativeName != "ENOSYS" || ie.NativeCode != 38 ||
			!strings.Contains(ie.Cause, "the kernel has RDMA devices (mlx5_0 in ") || !strings.Contains(ie.Cause, "ib_uverbs module is not loaded") {
			t.Errorf("got %+v", ie)
		}
	})
	t.Run("devices without /dev/infiniband give no devices", func(t *testing.T) {
		sys := abs("ib-healthy")
		ie := initErr(t, launch(t, "SYSFS_PATH="+sys), fmt.Sprintf(`{"sysfs_root":%q,"dev_root":"/dev"}`, sys))
		if ie.Step != plugins.StepProbeDevices || ie.NativeName != "" ||
			!strings.Contains(ie.Cause, "libibverbs found no RDMA devices: sysfs has mlx5_0, mlx5_1 but their device nodes do not exist: mlx5_0 (/dev/infiniband/uverbs0)") ||
			!strings.Contains(ie.Cause, "/dev/infiniband is not mounted into this container") {
			t.Errorf("got %+v", ie)
		}
	})
	t.Run("no devices at all", func(t *testing.T) {
		sys := abs("no-devices")
		ie := initErr(t, launch(t, "SYSFS_PATH="+sys), fmt.Sprintf(`{"sysfs_root":%q}`, sys))
		if ie.Step != plugins.StepProbeDevices || !strings.Contains(ie.Cause, "libibverbs found no RDMA devices and") {
			t.Errorf("got %+v", ie)
		}
	})
}
