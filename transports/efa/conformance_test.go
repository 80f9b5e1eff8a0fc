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

// TestConformance runs the suite over each software provider in process
// and over in-memory gRPC, and as a plugin over the first (tcp;ofi_rxm);
// TestConformancePlugins runs it as a plugin over the others.
func TestConformance(t *testing.T) {
	for i, p := range softProviders {
		t.Run(p.name, func(t *testing.T) {
			m := transporttest.Modes{
				New:     func() plugins.Transport { return efa.New() },
				Env:     p.env,
				Options: []byte(p.opts),
			}
			if i == 0 {
				m.Binary = testbin.MustBuild(t, "./cmd/kvconnect-transport-efa", "kvconnect-transport-efa")
			}
			transporttest.RunModes(t, m)
		})
	}
}

// TestConformancePlugins runs the suite with the plugin binary over the
// providers TestConformance runs it in process only, and over shm
// without CMA.
func TestConformancePlugins(t *testing.T) {
	testbin.Long(t, "the conformance suite once more as plugin processes")
	bin := testbin.MustBuild(t, "./cmd/kvconnect-transport-efa", "kvconnect-transport-efa")
	for _, p := range softProviders[1:] {
		t.Run(p.name, func(t *testing.T) {
			transporttest.Run(t, transporttest.Harness{New: transporttest.Plugin(bin, p.env...), Options: []byte(p.opts)})
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

// loggedTransport gives an in-process transport the test's logger.
type loggedTransport struct {
	*efa.Transport
	t *testing.T
}

func (l *loggedTransport) Init(ctx context.Context, req plugins.InitRequest) (plugins.InitResult, error) {
	req.Logger = zaptest.NewLogger(l.t)
	return l.Transport.Init(ctx, req)
}
