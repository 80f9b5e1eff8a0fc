package efa_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/kvconnect/kvconnect/internal/testbin"
	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/plugins/host"
	"github.com/kvconnect/kvconnect/transports/efa"
)

func pluginBin(t testing.TB) string {
	t.Helper()
	bin, err := testbin.Build("./cmd/kvconnect-transport-efa", "kvconnect-transport-efa")
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

func launch(t testing.TB, bin string, env ...string) *host.Plugin {
	t.Helper()
	p, err := host.Launch(context.Background(), host.LaunchConfig{Name: "efa", Path: bin,
		Env: env})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close(context.Background()) })
	return p
}

func hasEFADevice() bool {
	m, _ := filepath.Glob("/dev/infiniband/uverbs*")
	return len(m) > 0
}

// checkENODATA checks the diagnosis of protocol efa on a host without an
// EFA device: fi_getinfo's -61 (FI_ENODATA), at the probe step, wrapping
// ErrUnavailable so the connector falls back, with hints naming what EFA
// needs.
func checkENODATA(t *testing.T, where string, err error) {
	t.Helper()
	var ie *plugins.InitError
	if !errors.As(err, &ie) {
		t.Fatalf("%s: Init: got %v (%T), want an *plugins.InitError", where, err, err)
	}
	if !errors.Is(err, plugins.ErrUnavailable) {
		t.Errorf("%s: %v does not wrap ErrUnavailable: the connector would not fall back", where, err)
	}
	if ie.Transport != "efa" || ie.Step != plugins.StepProbeDevices || ie.NativeCode != -61 || ie.NativeName != "FI_ENODATA" {
		t.Errorf("%s: got transport %q step %q code %d %s, want efa / %q / -61 FI_ENODATA", where, ie.Transport, ie.Step, ie.NativeCode, ie.NativeName, plugins.StepProbeDevices)
	}
	hints := strings.Join(ie.Hints, "\n")
	for _, want := range []string{"efa kernel driver", "/dev/infiniband/uverbs", "libefa", "ibverbs-providers", "fi_info -p efa", "protocol tcp"} {
		if !strings.Contains(hints, want) {
			t.Errorf("%s: hints do not mention %q:\n%s", where, want, hints)
		}
	}
	if !strings.Contains(ie.Cause, "No data available") || !strings.Contains(ie.Cause, "uverbs") {
		t.Errorf("%s: cause lacks fi_strerror's text or the host facts: %s", where, ie.Cause)
	}
	t.Logf("%s diagnosis:\n%s\nhints:\n  %s", where, err, strings.Join(ie.Hints, "\n  "))
}

// The default provider on this host (no EFA device) is a real fi_getinfo
// failure, in-process and across the plugin boundary.
func TestDefaultProviderENODATA(t *testing.T) {
	if hasEFADevice() {
		t.Skip("this host has an EFA device (/dev/infiniband/uverbs*): protocol efa may well start")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tr := efa.New()
	_, err := tr.Init(ctx, plugins.InitRequest{Hostname: "127.0.0.1", Protocol: "efa"})
	checkENODATA(t, "in-process", err)
	if err := tr.Close(ctx); err != nil {
		t.Errorf("Close after a failed Init: %v", err)
	}
	p := launch(t, pluginBin(t))
	_, err = p.Init(ctx, plugins.InitRequest{Hostname: "127.0.0.1", Protocol: "efa"})
	checkENODATA(t, "plugin", err)
}

// Mooncake's device_name picks the domain; EFA's RDM domain is named after
// the device with "-rdm", which is tried too.
func TestDeviceNameSelectsDomain(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tr := efa.New()
	defer tr.Close(ctx)
	res, err := tr.Init(ctx, plugins.InitRequest{Hostname: "127.0.0.1", DeviceName: "lo,eth0", Options: []byte(`{"provider":"tcp;ofi_rxm"}`)})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(res.Summary, "domain lo ") || !strings.Contains(res.Summary, "127.0.0.1") {
		t.Errorf("summary %q: want domain lo at 127.0.0.1", res.Summary)
	}
	t.Log(res.Summary)

	_, err = efa.New().Init(ctx, plugins.InitRequest{DeviceName: "nosuchnic0", Options: []byte(`{"provider":"tcp;ofi_rxm"}`)})
	var ie *plugins.InitError
	if !errors.As(err, &ie) || !errors.Is(err, plugins.ErrUnavailable) || ie.NativeCode != -61 || ie.Step != plugins.StepProbeDevices {
		t.Fatalf("unknown domain: got %v, want a -61 InitError at %q wrapping ErrUnavailable", err, plugins.StepProbeDevices)
	}
	if !strings.Contains(ie.Cause, `no domain "nosuchnic0"`) || !strings.Contains(ie.Cause, "lo") {
		t.Errorf("unknown domain: cause should name the domain asked for and the ones there are: %s", ie.Cause)
	}
	t.Log(err)
}

func TestOptionErrors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, tc := range []struct {
		opts, device, key string
	}{
		{opts: `{"provider":""}`, key: "transports.efa.provider"},
		{opts: `{"provider":"tcp ofi_rxm"}`, key: "transports.efa.provider"},
		{opts: `{"library":""}`, key: "transports.efa.library"},
		{opts: `{"max_inflight":0}`, key: "transports.efa.max_inflight"},
		{opts: `{"max_inflight":"many"}`, key: "transports.efa.max_inflight"},
		{opts: `{"max_regions":0}`, key: "transports.efa.max_regions"},
		{opts: `{"chunk_size":"1KiB"}`, key: "transports.efa.chunk_size"},
		{opts: `{"op_timeout":"0s"}`, key: "transports.efa.op_timeout"},
		{opts: `{"progress_interval":"5s"}`, key: "transports.efa.progress_interval"},
		{opts: `{"verify_regions":"sometimes"}`, key: "transports.efa.verify_regions"},
		{opts: `{"provder":"shm"}`, key: "transports.efa.provder"},
		{opts: `[1]`, key: "transports.efa"},
		{device: `{"0":"rdmap16s27"}`, key: "device_name"},
	} {
		t.Run(tc.key, func(t *testing.T) {
			_, err := efa.New().Init(ctx, plugins.InitRequest{Options: []byte(tc.opts), DeviceName: tc.device})
			var ie *plugins.InitError
			if !errors.As(err, &ie) || ie.Step != plugins.StepConfigure || !errors.Is(err, plugins.ErrInvalidArgument) {
				t.Fatalf("%s: got %v, want an InitError at %q wrapping ErrInvalidArgument", tc.opts+tc.device, err, plugins.StepConfigure)
			}
			if !strings.Contains(err.Error(), tc.key) {
				t.Errorf("error does not name %s: %v", tc.key, err)
			}
		})
	}
}

// A library that is not there (or not libfabric) is a diagnosis at the
// load step, not a crash. In a fresh plugin process: this test process
// may have loaded libfabric already, and one process loads one libfabric.
func TestLibraryOptionMissing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := launch(t, pluginBin(t))
	_, err := p.Init(ctx, plugins.InitRequest{Options: []byte(`{"library":"/nonexistent/libfabric.so.1"}`)})
	checkLoadLibrary(t, "library option", err, "/nonexistent/libfabric.so.1")
	if !strings.Contains(err.Error(), "No such file") {
		t.Errorf("the diagnosis should carry dlopen's reason: %v", err)
	}
	notLib := filepath.Join(t.TempDir(), "libnotfabric.so")
	if err := os.WriteFile(notLib, []byte("not an ELF file"), 0o644); err != nil {
		t.Fatal(err)
	}
	p = launch(t, pluginBin(t))
	_, err = p.Init(ctx, plugins.InitRequest{Options: []byte(fmt.Sprintf(`{"library":%q}`, notLib))})
	checkLoadLibrary(t, "not a library", err, notLib)
}

func checkLoadLibrary(t testing.TB, where string, err error, path string) {
	t.Helper()
	var ie *plugins.InitError
	if !errors.As(err, &ie) || ie.Step != plugins.StepLoadLibrary || !errors.Is(err, plugins.ErrUnavailable) {
		t.Fatalf("%s: got %v, want an InitError at %q wrapping ErrUnavailable", where, err, plugins.StepLoadLibrary)
	}
	if !strings.Contains(ie.Cause, path) || !strings.Contains(strings.Join(ie.Hints, " "), "libfabric1") {
		t.Errorf("%s: the diagnosis should name %s and the Debian package libfabric1: %v %q", where, path, err, ie.Hints)
	}
	t.Logf("%s: %v", where, err)
}

const helperEnv = "KVCONNECT_EFA_TEST_HELPER"

// missingLibraryHelper runs inside TestMissingLibfabric's mount namespace,
// where libfabric.so.1 is an empty file: the transport, in-process and as
// a plugin (which still starts: libfabric is not linked), must say so at
// the load step.
func missingLibraryHelper() int {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	fail := func(format string, a ...any) int {
		fmt.Printf("HELPER-FAIL: "+format+"\n", a...)
		return 1
	}
	check := func(where string, err error) error {
		var ie *plugins.InitError
		if !errors.As(err, &ie) || ie.Step != plugins.StepLoadLibrary || !errors.Is(err, plugins.ErrUnavailable) {
			return fmt.Errorf("%s: got %v, want an InitError at %q wrapping ErrUnavailable", where, err, plugins.StepLoadLibrary)
		}
		if !strings.Contains(ie.Cause, "libfabric.so.1") || !strings.Contains(strings.Join(ie.Hints, " "), "libfabric1") {
			return fmt.Errorf("%s: diagnosis lacks libfabric.so.1 or libfabric1: %v %q", where, err, ie.Hints)
		}
		fmt.Printf("%s: %v\n", where, err)
		return nil
	}
	_, err := efa.New().Init(ctx, plugins.InitRequest{Options: []byte(`{"provider":"tcp;ofi_rxm"}`)})
	if err := check("in-process", err); err != nil {
		return fail("%v", err)
	}
	p, err := host.Launch(ctx, host.LaunchConfig{Name: "efa", Path: os.Getenv(helperEnv + "_PLUGIN")})
	if err != nil {
		return fail("the plugin did not start without libfabric: %v", err)
	}
	defer p.Close(ctx)
	_, err = p.Init(ctx, plugins.InitRequest{Options: []byte(`{"provider":"tcp;ofi_rxm"}`)})
	if err := check("plugin", err); err != nil {
		return fail("%v", err)
	}
	fmt.Println("HELPER-OK")
	return 0
}

// findLibfabric returns the file libfabric.so.1 resolves to.
func findLibfabric() string {
	for _, d := range []string{"/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib"} {
		if p, err := filepath.EvalSymlinks(filepath.Join(d, "libfabric.so.1")); err == nil {
			return p
		}
	}
	return ""
}

// TestMissingLibfabric hides libfabric for real: in a private mount
// namespace the library file is bind-mounted over by an empty file, and
// the transport must report it (in-process and as a plugin) instead of
// crashing or failing to start.
func TestMissingLibfabric(t *testing.T) {
	lib := findLibfabric()
	if lib == "" {
		t.Skip("libfabric.so.1 is not installed here; TestLibraryOptionMissing covers the diagnosis")
	}
	if out, err := exec.Command("unshare", "-m", "true").CombinedOutput(); err != nil {
		t.Skipf("unshare -m is not permitted here (needs CAP_SYS_ADMIN or user namespaces), so libfabric cannot be hidden: %v %s", err, out)
	}
	bin := pluginBin(t)
	empty := filepath.Join(t.TempDir(), "empty.so")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("unshare", "-m", "sh", "-c", `mount --bind "$1" "$2" && exec "$3" -test.run '^$'`, "sh", empty, lib, os.Args[0])
	cmd.Env = append(os.Environ(), helperEnv+"=missing-library", helperEnv+"_PLUGIN="+bin)
	out, err := cmd.CombinedOutput()
	t.Logf("in the namespace (%s hidden):\n%s", lib, out)
	if err != nil || !strings.Contains(string(out), "HELPER-OK") {
		t.Fatalf("helper failed: %v", err)
	}
}

var _ = zaptest.NewLogger
