package rdma

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/kvconnect/kvconnect/plugins"
)

func initOptions(t *testing.T, fx, extra string) []byte {
	sys, dev := fixture(t, fx)
	return fmt.Appendf(nil, `{"sysfs_root":%q,"dev_root":%q%s}`, sys, dev, extra)
}

func TestInitPreflightPassedSaysDataPathNotBuilt(t *testing.T) {
	for _, c := range []struct {
		fx, device string
		loader     Loader
		want       []string
		notWant    string
	}{
		{"ib-healthy", "", listed("mlx5_0", "mlx5_1"),
			[]string{"RDMA preflight passed: mlx5_0 (port 1 ACTIVE, InfiniBand, GID index 0 fe80::c42:a103:b4:5e20), mlx5_1 (port 1 ACTIVE, InfiniBand, GID index 0 fe80::c42:a103:b4:5e38) look usable, but the RDMA data path is not built yet"}, ""},
		{"ib-healthy", "mlx5_1", listed("mlx5_0", "mlx5_1"), []string{"mlx5_1 (port 1 ACTIVE", "looks usable"}, "mlx5_0"},
		{"roce-healthy", "", listed("mlx5_0"), []string{"mlx5_0 (port 1 ACTIVE, Ethernet, GID index 3 ::ffff:10.0.10.7)"}, ""},
	} {
		tr := New()
		tr.loader, tr.memlock = c.loader, unlimited
		_, err := tr.Init(context.Background(), plugins.InitRequest{Protocol: "rdma", DeviceName: c.device,
			Options: initOptions(t, c.fx, ""), Logger: zaptest.NewLogger(t)})
		var ie *plugins.InitError
		if !errors.As(err, &ie) || !errors.Is(err, plugins.ErrUnavailable) {
			t.Fatalf("%s: Init = %v, want an InitError wrapping ErrUnavailable", c.fx, err)
		}
		if ie.Step != plugins.StepDataPath || ie.Transport != "rdma" || len(ie.Hints) == 0 {
			t.Errorf("%s: %+v", c.fx, ie)
		}
		for _, w := range c.want {
			if !strings.Contains(ie.Cause, w) {
				t.Errorf("%s: cause lacks %q:\n%s", c.fx, w, ie.Cause)
			}
		}
		if c.notWant != "" && strings.Contains(ie.Cause, c.notWant) {
			t.Errorf("%s: cause names %s: %s", c.fx, c.notWant, ie.Cause)
		}
		if !strings.Contains(ie.Hints[0], "fallback chain moves on") {
			t.Errorf("hints: %q", ie.Hints)
		}
		tr.Close(context.Background())
	}
}

func TestInitReturnsTheDiagnosis(t *testing.T) {
	tr := New()
	tr.loader, tr.memlock = listed("mlx5_0"), unlimited
	_, err := tr.Init(context.Background(), plugins.InitRequest{Options: initOptions(t, "ib-port-down", `,"ib_port":1,"gid_index":-1,"min_memlock":"1GiB"`)})
	var ie *plugins.InitError
	if !errors.As(err, &ie) || ie.Step != plugins.StepOpenDevice || !strings.Contains(ie.Cause, "mlx5_0 port 1 is not ACTIVE") {
		t.Fatalf("Init = %v", err)
	}
	// min_memlock decodes from a size string and is applied.
	tr = New()
	tr.loader, tr.memlock = listed("mlx5_0", "mlx5_1"), func() Memlock { return Memlock{Soft: 512 << 20, Hard: 512 << 20} }
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
	} {
		tr := New()
		tr.loader = listed()
		_, err := tr.Init(context.Background(), plugins.InitRequest{Options: []byte(c.opts)})
		var ie *plugins.InitError
		if !errors.As(err, &ie) || ie.Step != plugins.StepConfigure || !errors.Is(err, plugins.ErrInvalidArgument) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Init = %v, want a configure error with %q", c.opts, err, c.want)
		}
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
	tr.loader = listed()
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
