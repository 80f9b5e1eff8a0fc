package transporttest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"go.uber.org/zap/zaptest"

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
			Env: append([]string{"GORACE=atexit_sleep_ms=0"}, env...),
		})
		if err != nil {
			t.Fatalf("launching %s: %v", path, err)
		}
		return p
	}
}

var (
	buildMu sync.Mutex
	builds  = map[string]string{}
)

// BuildPlugin builds the main package pkg (an import path, or a path
// relative to the test's working directory, which is the module of the
// package under test) into a temporary directory and returns the
// executable's path. It builds with -race when the test binary has the
// race detector, once per package per test process; the directory is
// removed when the test that first asked for it ends.
func BuildPlugin(t testing.TB, pkg string) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if p, ok := builds[pkg]; ok {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	out := filepath.Join(t.TempDir(), filepath.Base(pkg))
	args := []string{"build", "-o", out}
	if raceEnabled {
		args = append(args, "-race")
	}
	cmd := exec.Command("go", append(args, pkg)...)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	builds[pkg] = out
	return out
}
