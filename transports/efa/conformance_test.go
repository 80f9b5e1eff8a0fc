package efa_test

import (
	"context"
	"os"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/kvconnect/kvconnect/internal/testbin"
	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/plugins/transporttest"
	"github.com/kvconnect/kvconnect/transports/efa"
)

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "missing-library" {
		os.Exit(missingLibraryHelper())
	}
	testbin.Main(m)
}

// softProviders are the libfabric software providers that implement the
// same RDM + RMA interface as efa, with their options. op_timeout is short
// so that a peer that dies without the provider noticing (shm) fails its
// ops well within the suite's limit.
var softProviders = []struct {
	name string
	opts string
	env  []string // for the plugin process
}{
	{name: "tcp_rxm", opts: `{"provider":"tcp;ofi_rxm","domain":"lo","op_timeout":"3s"}`},
	{name: "shm", opts: `{"provider":"shm","op_timeout":"3s"}`},
}

// TestConformance runs the suite over each software provider in
// process. An efa plugin process pays a second at its first fi_getinfo
// (libfabric reads /proc/kallsyms) and a tcp;ofi_rxm endpoint half a
// second to open, so the suite behind the plugin protocol (in-memory gRPC
// and plugin processes) is TestConformancePlugins' (make test-long); the
// plugin protocol itself runs the suite in make test with the tcp and ucx
// transports.
func TestConformance(t *testing.T) {
	for _, p := range softProviders {
		t.Run(p.name, func(t *testing.T) {
			t.Run("InProcess", func(t *testing.T) {
				transporttest.Run(t, transporttest.Harness{New: transporttest.InProcess(newEFA), Options: []byte(p.opts)})
			})
		})
	}
}

// TestConformancePlugins runs the suite over each provider over
// in-memory gRPC and as plugin processes, and as a plugin over shm
// without CMA.
func TestConformancePlugins(t *testing.T) {
	testbin.Long(t, "the conformance suite once more behind the plugin protocol")
	bin := testbin.MustBuild(t, "./cmd/kvconnect-transport-efa", "kvconnect-transport-efa")
	for _, p := range softProviders {
		t.Run(p.name, func(t *testing.T) {
			t.Run("InMemoryGRPC", func(t *testing.T) {
				transporttest.Run(t, transporttest.Harness{New: transporttest.InMemoryGRPC(newEFA), Options: []byte(p.opts)})
			})
			t.Run("Plugin", func(t *testing.T) {
				transporttest.Run(t, transporttest.Harness{New: transporttest.Plugin(bin, p.env...), Options: []byte(p.opts)})
			})
		})
	}
	// shm copies with process_vm_readv/writev (CMA) when ptrace rules
	// allow it, else through its shared-memory segments (SAR): the second
	// path is what containers without ptrace permission get.
	t.Run("shm_without_cma", func(t *testing.T) {
		transporttest.Run(t, transporttest.Harness{
			New:     transporttest.Plugin(bin, "FI_SHM_DISABLE_CMA=1"),
			Options: []byte(`{"provider":"shm","op_timeout":"3s"}`),
		})
	})
}

func newEFA() plugins.Transport { return efa.New() }

// loggedTransport gives an in-process transport the test's logger.
type loggedTransport struct {
	*efa.Transport
	t *testing.T
}

func (l *loggedTransport) Init(ctx context.Context, req plugins.InitRequest) (plugins.InitResult, error) {
	req.Logger = zaptest.NewLogger(l.t)
	return l.Transport.Init(ctx, req)
}
