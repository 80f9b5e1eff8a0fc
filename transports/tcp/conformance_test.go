package tcp_test

import (
	"context"
	"os"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/kvconnect/kvconnect/internal/testbin"
	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/plugins/host"
	"github.com/kvconnect/kvconnect/plugins/transporttest"
	"github.com/kvconnect/kvconnect/transports/tcp"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testbin.Cleanup()
	os.Exit(code)
}

func TestConformanceInProcess(t *testing.T) {
	transporttest.Run(t, transporttest.Harness{
		New: func(t *testing.T) plugins.Transport { return tcp.New() },
	})
}

func TestConformanceSubprocess(t *testing.T) {
	bin, err := testbin.Build("./cmd/kvconnect-transport-tcp", "kvconnect-transport-tcp")
	if err != nil {
		t.Fatal(err)
	}
	transporttest.Run(t, transporttest.Harness{
		New: func(t *testing.T) plugins.Transport {
			p, err := host.Launch(context.Background(), host.LaunchConfig{Name: "tcp", Path: bin, Logger: zaptest.NewLogger(t),
				Env: []string{"GORACE=atexit_sleep_ms=0"}})
			if err != nil {
				t.Fatal(err)
			}
			return p
		},
	})
}
