package efa_test

import (
	"context"
	"os"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/kvconnect/kvconnect/internal/testbin"
	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/plugins/host"
	"github.com/kvconnect/kvconnect/plugins/transporttest"
	"github.com/kvconnect/kvconnect/transports/efa"
)

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "missing-library" {
		os.Exit(missingLibraryHelper())
	}
	code := m.Run()
	testbin.Cleanup()
	os.Exit(code)
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

func TestConformanceInProcess(t *testing.T) {
	for _, p := range softProviders {
		t.Run(p.name, func(t *testing.T) {
			transporttest.Run(t, transporttest.Harness{
				New: func(t *testing.T) plugins.Transport {
					return &loggedTransport{Transport: efa.New(), t: t}
				},
				Options: []byte(p.opts),
			})
		})
	}
}

func TestConformanceSubprocess(t *testing.T) {
	bin, err := testbin.Build("./cmd/kvconnect-transport-efa", "kvconnect-transport-efa")
	if err != nil {
		t.Fatal(err)
	}
	// shm copies with process_vm_readv/writev (CMA) when ptrace rules
	// allow it, else through its shared-memory segments (SAR): the second
	// path is what containers without ptrace permission get.
	variants := append(softProviders, struct {
		name string
		opts string
		env  []string
	}{name: "shm_without_cma", opts: `{"provider":"shm","op_timeout":"3s"}`, env: []string{"FI_SHM_DISABLE_CMA=1"}})
	for _, p := range variants {
		t.Run(p.name, func(t *testing.T) {
			transporttest.Run(t, transporttest.Harness{
				New: func(t *testing.T) plugins.Transport {
					pl, err := host.Launch(context.Background(), host.LaunchConfig{Name: "efa", Path: bin, Logger: zaptest.NewLogger(t),
						Env: append([]string{"GORACE=atexit_sleep_ms=0"}, p.env...)})
					if err != nil {
						t.Fatal(err)
					}
					return pl
				},
				Options: []byte(p.opts),
			})
		})
	}
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
