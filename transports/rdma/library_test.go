package rdma

import (
	"context"
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/kvconnect/kvconnect/plugins"
)

// TestRealLoaderOnThisHost runs the real libibverbs loader and asserts
// what it returns here. On this project's machines libibverbs is installed
// and the kernel has no RDMA support (no /sys/class/infiniband_verbs), so
// ibv_get_device_list fails with ENOSYS. The test states its expectation
// from the host instead of skipping.
func TestRealLoaderOnThisHost(t *testing.T) {
	ctx := context.Background()
	lib := LoadLibibverbs(ctx)
	t.Logf("real loader: %+v", lib)
	r := Probe(ctx, ProbeOptions{Options: DefaultOptions()})
	t.Logf("real probe:\n%s", r)
	_, verbsErr := os.Stat("/sys/class/infiniband_verbs")
	switch {
	case lib.Unsupported != "":
		if r.Check != CheckLibrary || !strings.Contains(r.Diagnosis.Cause, "without cgo") && !strings.Contains(r.Diagnosis.Cause, "needs Linux") {
			t.Fatalf("no-cgo build: %s %v", r.Check, r.Diagnosis)
		}
	case !lib.Loaded:
		if !strings.Contains(lib.LoadError, "libibverbs.so.1") {
			t.Errorf("load error %q does not name the library", lib.LoadError)
		}
		checkDiag(t, r.Diagnosis, plugins.StepLoadLibrary, "", 0, []string{"cannot load libibverbs.so.1"}, []string{"ibverbs-providers"})
	case errors.Is(verbsErr, os.ErrNotExist):
		if lib.Listed || lib.ListErrno != syscall.ENOSYS {
			t.Fatalf("no /sys/class/infiniband_verbs here, so ibv_get_device_list must fail with ENOSYS; got %+v", lib)
		}
		if r.Check != CheckDeviceList {
			t.Fatalf("check = %s", r.Check)
		}
		cause := []string{"ibv_get_device_list failed with ENOSYS (function not implemented)"}
		if _, err := os.Stat("/sys/class/infiniband"); errors.Is(err, os.ErrNotExist) {
			cause = append(cause, "neither /sys/class/infiniband nor /sys/class/infiniband_verbs exists")
		}
		checkDiag(t, r.Diagnosis, plugins.StepProbeDevices, "ENOSYS", 38, cause,
			[]string{"modprobe mlx5_ib ib_uverbs rdma_ucm", "--device /dev/infiniband", "--cap-add IPC_LOCK", "protocol tcp"})
		if !errors.Is(r.Diagnosis, plugins.ErrUnavailable) {
			t.Error("diagnosis does not wrap ErrUnavailable")
		}
	default:
		if !lib.Listed {
			t.Fatalf("this host has uverbs support, yet ibv_get_device_list failed: %+v", lib)
		}
	}
}

// The not-installed diagnosis with the real dlopen: a library that does
// not exist, and one that exists but is not libibverbs.
func TestRealLoaderLibraryMissing(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		soname  string
		loadErr string
	}{
		{"libkvconnect-no-such-verbs.so.1", "cannot open shared object file"},
		{"libc.so.6", "lacks ibv_get_device_list"},
	} {
		lib := loadLibrary(c.soname)
		if lib.Unsupported != "" {
			r := Probe(ctx, ProbeOptions{Options: DefaultOptions(), Loader: func(context.Context) Library { return lib }})
			checkDiag(t, r.Diagnosis, plugins.StepLoadLibrary, "", 0, []string{lib.Unsupported}, []string{"CGO_ENABLED=1"})
			continue
		}
		if lib.Loaded || !strings.Contains(lib.LoadError, c.loadErr) {
			t.Fatalf("%s: %+v, want a load error with %q", c.soname, lib, c.loadErr)
		}
		r := Probe(ctx, ProbeOptions{Options: DefaultOptions(), Loader: func(context.Context) Library { return lib }, Memlock: unlimited})
		if r.Check != CheckLibrary {
			t.Fatalf("%s: check = %s", c.soname, r.Check)
		}
		checkDiag(t, r.Diagnosis, plugins.StepLoadLibrary, "", 0,
			[]string{"cannot load " + c.soname + ", the RDMA verbs library: ", c.loadErr, "is libibverbs installed?"},
			[]string{"apt-get install libibverbs1 ibverbs-providers", "dnf install rdma-core", "LD_LIBRARY_PATH", "protocol tcp"})
	}
}
