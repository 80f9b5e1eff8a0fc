package transporttest

import (
	"context"
	"path/filepath"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/kvconnect/kvconnect/internal/testbin"
	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/plugins/host"
)

// InProcess hosts the transport made by newT in the test process.
func InProcess(newT func() plugins.Transport) func(*testing.T) plugins.Transport {
	return func(*testing.T) plugins.Transport { return newT() }
}

// InMemoryGRPC hosts the transport made by newT behind the plugin
// protocol, in the test process: every call crosses the same gRPC
// service, op packing, error mapping and region file passing as with a
// plugin process (plugins/host.InMemory), with no binary to build.
func InMemoryGRPC(newT func() plugins.Transport) func(*testing.T) plugins.Transport {
	return func(t *testing.T) plugins.Transport {
		tr, err := host.InMemory(newT(), "transport-under-test", zaptest.NewLogger(t))
		if err != nil {
			t.Fatalf("serving the transport in memory: %v", err)
		}
		return tr
	}
}

// Plugin launches the plugin executable at path (with extra environment
// env) for each node, as a kvconnect host does.
func Plugin(path string, env ...string) func(*testing.T) plugins.Transport {
	return func(t *testing.T) plugins.Transport {
		p, err := host.Launch(context.Background(), host.LaunchConfig{
			Name: filepath.Base(path), Path: path, Logger: zaptest.NewLogger(t),
			// race-built plugins otherwise sleep 1 s when they exit
			Env: append([]string{testbin.QuickExit}, env...),
		})
		if err != nil {
			t.Fatalf("launching %s: %v", path, err)
		}
		return p
	}
}

// BuildPlugin builds the main package pkg (an import path, or a path
// relative to the test's working directory, which is the module of the
// package under test) and returns the executable's path. It builds with
// -race when the test binary has the race detector, once per package per
// test process, into the build directory every test of the process shares
// (internal/testbin); a later test process removes it if this one could
// not.
func BuildPlugin(t testing.TB, pkg string) string {
	t.Helper()
	bin, err := testbin.BuildIn("", pkg, filepath.Base(pkg))
	if err != nil {
		t.Fatal(err)
	}
	return bin
}
