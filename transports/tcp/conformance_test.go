package tcp_test

import (
	"os"
	"testing"

	"github.com/kvconnect/kvconnect/internal/testbin"
	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/plugins/transporttest"
	"github.com/kvconnect/kvconnect/transports/tcp"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testbin.Cleanup()
	os.Exit(code)
}

func TestConformance(t *testing.T) {
	bin, err := testbin.Build("./cmd/kvconnect-transport-tcp", "kvconnect-transport-tcp")
	if err != nil {
		t.Fatal(err)
	}
	transporttest.RunModes(t, transporttest.Modes{
		New:    func() plugins.Transport { return tcp.New() },
		Binary: bin,
	})
}
