package ascend_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/kvconnect/kvconnect/internal/testbin"
	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/plugins/host"
	"github.com/kvconnect/kvconnect/transports/ascend"
)

// helperEnv makes the test binary, started again by
// TestProbeSystemLoader, run a probe and print its report instead of the
// tests.
const helperEnv = "KVCONNECT_ASCEND_PROBE_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(probeHelper())
	}
	testbin.Main(m)
}

// probeHelper probes with LD_LIBRARY_PATH hidden from the probe's own
// search, so only the system loader (which read LD_LIBRARY_PATH when this
// process started) can find the library.
func probeHelper() int {
	dev, _ := filepath.Abs(filepath.Join("testdata", "two-npus", "dev"))
	r := ascend.Probe(context.Background(), ascend.ProbeOptions{
		NPUID: 0, DevRoot: dev, AscendHome: os.Getenv(helperEnv),
		Getenv: func(k string) string {
			if k == ascend.EnvLDLibraryPath {
				return ""
			}
			return os.Getenv(k)
		},
	})
	if err := json.NewEncoder(os.Stdout).Encode(r); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

func buildLib(t *testing.T, dir string) {
	t.Helper()
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("gcc not found")
	}
	src := filepath.Join(t.TempDir(), "acl.c")
	if err := os.WriteFile(src, []byte("int aclInit(const char *p) { (void)p; return 0; }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if b, err := exec.Command(gcc, "-shared", "-fPIC", "-o", filepath.Join(dir, ascend.Library), src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, b)
	}
}

// cgoBuild reports whether the test binary (and so the plugin built the
// same way) can dlopen: without cgo the probe says so.
func cgoBuild(t *testing.T) bool {
	t.Helper()
	home := t.TempDir()
	buildLib(t, filepath.Join(home, "lib64"))
	p := ascend.Probe(context.Background(), ascend.ProbeOptions{NPUID: 0, DevRoot: t.TempDir(), AscendHome: home, Getenv: func(string) string { return "" }})
	c, _ := p.Check(ascend.CheckLibrary)
	return c.Status == ascend.StatusOK
}

// TestProbeSystemLoader covers the last place the library is looked for:
// the system loader's default path, here LD_LIBRARY_PATH as the process
// started with it.
func TestProbeSystemLoader(t *testing.T) {
	if !cgoBuild(t) {
		t.Skip("built without cgo")
	}
	dir := t.TempDir()
	buildLib(t, dir)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+t.TempDir(), "LD_LIBRARY_PATH="+dir)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	var r ascend.Report
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("helper output %q: %v", out, err)
	}
	if p := r.Problem(); p != nil {
		t.Fatalf("problem %v; want the library found by the system loader", p)
	}
	if want := filepath.Join(dir, ascend.Library); r.Library != want {
		t.Errorf("library %q; want %q", r.Library, want)
	}
	if last := r.Searched[len(r.Searched)-1]; !strings.HasPrefix(last, "the system loader's default path") {
		t.Errorf("last place searched %q; want the system loader", last)
	}
	c, _ := r.Check(ascend.CheckLibrary)
	if !strings.Contains(c.Detail, "found by the system loader") {
		t.Errorf("library check detail %q", c.Detail)
	}
}

func launch(t *testing.T, env ...string) *host.Plugin {
	t.Helper()
	bin, err := testbin.Build("./cmd/kvconnect-transport-ascend", "kvconnect-transport-ascend")
	if err != nil {
		t.Fatal(err)
	}
	p, err := host.Launch(context.Background(), host.LaunchConfig{Name: ascend.Name, Path: bin, Logger: zaptest.NewLogger(t),
		Env: env})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close(context.Background()) })
	return p
}

// TestPluginOnThisHost is what SGLang's ENABLE_ASCEND_TRANSFER_WITH_MOONCAKE=1
// ASCEND_NPU_PHY_ID=3 gets from the real plugin binary on this host: an
// *InitError wrapping ErrUnavailable, across the gRPC boundary, carrying
// the same diagnosis as an in-process probe plus the NPU id and the
// host:port:npu_N name.
func TestPluginOnThisHost(t *testing.T) {
	// The plugin inherits this process's environment after
	// LaunchConfig.Env, so set the id in both.
	t.Setenv(ascend.EnvNPUPhyID, "3")
	p := launch(t, ascend.EnvNPUPhyID+"=3")
	ctx := context.Background()
	info, err := p.Info(ctx)
	if err != nil || info.Name != ascend.Name {
		t.Fatalf("Info = %+v, %v", info, err)
	}
	_, err = p.Init(ctx, plugins.InitRequest{Hostname: "127.0.0.1", Metadata: "P2PHANDSHAKE", Protocol: ascend.Name})
	if !errors.Is(err, plugins.ErrUnavailable) {
		t.Fatalf("Init: %v; want ErrUnavailable", err)
	}
	var ie *plugins.InitError
	if !errors.As(err, &ie) {
		t.Fatalf("Init: %T %v; want an *InitError", err, err)
	}
	want := ascend.Probe(ctx, ascend.ProbeOptions{NPUID: ascend.NoNPUID}).Problem()
	if want == nil {
		want = &plugins.InitError{Transport: ascend.Name, Step: plugins.StepDataPath, Cause: ascend.DataPathUnavailable}
	}
	if ie.Transport != ascend.Name || ie.Step != want.Step || !strings.HasPrefix(ie.Cause, want.Cause) ||
		ie.NativeCode != want.NativeCode || ie.NativeName != want.NativeName {
		t.Errorf("plugin diagnosis %s/%s %q (%s %d); want %s/%s %q (%s %d)", ie.Transport, ie.Step, ie.Cause, ie.NativeName, ie.NativeCode,
			want.Transport, want.Step, want.Cause, want.NativeName, want.NativeCode)
	}
	if len(want.Hints) > 0 && strings.Join(ie.Hints, "\n") != strings.Join(want.Hints, "\n") {
		t.Errorf("hints %q; want %q", ie.Hints, want.Hints)
	}
	if !strings.Contains(ie.Cause, ":npu_3; NPU id 3 from ASCEND_NPU_PHY_ID)") || !strings.Contains(ie.Cause, "would publish segment 127.0.0.1:") {
		t.Errorf("cause %q does not show the segment name 127.0.0.1:<port>:npu_3 and the NPU id's source", ie.Cause)
	}
	t.Logf("on this host:\n%v\nhints:\n  %s", err, strings.Join(ie.Hints, "\n  "))

	if _, err := p.Connect(ctx, plugins.PeerInfo{Name: "10.0.0.1:15000"}); !errors.Is(err, plugins.ErrNotInitialized) {
		t.Errorf("Connect after a failed Init: %v; want ErrNotInitialized", err)
	}
}

// TestPluginDataPath runs the plugin binary against a complete fixture
// host (device nodes, a loadable libascendcl.so): Init ends in the data
// path diagnosis, across the gRPC boundary.
func TestPluginDataPath(t *testing.T) {
	if !cgoBuild(t) {
		t.Skip("built without cgo")
	}
	home := t.TempDir()
	buildLib(t, filepath.Join(home, "lib64"))
	dev, err := filepath.Abs(filepath.Join("testdata", "npu3-container", "dev"))
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(ascend.EnvNPUPhyID, "3")
	p := launch(t, ascend.EnvNPUPhyID+"=3")
	opts, _ := json.Marshal(map[string]any{"dev_root": dev, "ascend_home": home, "port": 15432})
	_, err = p.Init(context.Background(), plugins.InitRequest{Hostname: "127.0.0.1", Protocol: ascend.Name, Options: opts})
	var ie *plugins.InitError
	if !errors.Is(err, plugins.ErrUnavailable) || !errors.As(err, &ie) {
		t.Fatalf("Init: %v; want an *InitError wrapping ErrUnavailable", err)
	}
	want := ascend.DataPathUnavailable + " (would publish segment 127.0.0.1:15432:npu_3; NPU id 3 from ASCEND_NPU_PHY_ID)"
	if ie.Step != plugins.StepDataPath || ie.Cause != want {
		t.Errorf("diagnosis %s %q; want %s %q", ie.Step, ie.Cause, plugins.StepDataPath, want)
	}
	t.Logf("complete fixture host:\n%v\nhints:\n  %s", err, strings.Join(ie.Hints, "\n  "))
}
