//go:build linux && cgo

package ucx_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/kvconnect/kvconnect/internal/testbin"
	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/plugins/host"
	"github.com/kvconnect/kvconnect/plugins/transporttest"
	"github.com/kvconnect/kvconnect/transports/ucx"
)

// lanes are the UCX lane lists the suite runs over: UCX's tcp transport
// (RMA emulated with active messages, so the target's progress thread does
// the work) and shared memory between processes (posix/sysv for active
// messages, cma for RMA).
var lanes = []string{"tcp", "sm", "posix,cma"}

func options(t testing.TB, tls string) []byte {
	o := map[string]any{"tls": tls}
	if strings.Contains(tls, "tcp") {
		// Loopback only: other tests add and remove network interfaces
		// (veth ends of network namespaces) while this suite runs.
		o["net_devices"] = "lo"
	}
	b, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func pluginBinary(t testing.TB) string {
	bin, err := testbin.Build("./cmd/kvconnect-transport-ucx", "kvconnect-transport-ucx")
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

func launch(t testing.TB, bin string) plugins.Transport {
	p, err := host.Launch(context.Background(), host.LaunchConfig{Name: "ucx", Path: bin, Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestConformance runs the suite once over each lane list: in process
// over tcp and posix,cma, and over sm as the plugin binary (shared memory
// between processes is what sm is for; the binary runs the transport code
// the in-process runs do, behind the plugin protocol).
// TestConformancePlugins runs the other combinations (make test-long).
func TestConformance(t *testing.T) {
	bin := pluginBinary(t)
	for _, tls := range lanes {
		t.Run(tls, func(t *testing.T) {
			if tls == "sm" {
				t.Run("Plugin", func(t *testing.T) {
					transporttest.Run(t, transporttest.Harness{New: transporttest.Plugin(bin), Options: options(t, tls)})
				})
				return
			}
			t.Run("InProcess", func(t *testing.T) {
				transporttest.Run(t, transporttest.Harness{New: transporttest.InProcess(newUCX), Options: options(t, tls)})
			})
		})
	}
}

// TestConformancePlugins runs the suite in the modes TestConformance
// leaves out: over in-memory gRPC for every lane list, as the plugin
// binary over tcp and posix,cma, in process over sm.
func TestConformancePlugins(t *testing.T) {
	testbin.Long(t, "the conformance suite once more in each mode")
	bin := pluginBinary(t)
	for _, tls := range lanes {
		t.Run(tls, func(t *testing.T) {
			t.Run("InMemoryGRPC", func(t *testing.T) {
				transporttest.Run(t, transporttest.Harness{New: transporttest.InMemoryGRPC(newUCX), Options: options(t, tls)})
			})
			if tls == "sm" {
				t.Run("InProcess", func(t *testing.T) {
					transporttest.Run(t, transporttest.Harness{New: transporttest.InProcess(newUCX), Options: options(t, tls)})
				})
				return
			}
			t.Run("Plugin", func(t *testing.T) {
				transporttest.Run(t, transporttest.Harness{New: transporttest.Plugin(bin), Options: options(t, tls)})
			})
		})
	}
}

func newUCX() plugins.Transport { return ucx.New() }
