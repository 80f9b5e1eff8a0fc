package simpletcp_test

import (
	"testing"

	"github.com/kvconnect/kvconnect/examples/transport-plugin/simpletcp"
	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/plugins/transporttest"
)

// TestConformance runs kvconnect's conformance suite in-process, over an
// in-memory gRPC connection (the plugin protocol without a process) and
// against the plugin binary.
func TestConformance(t *testing.T) {
	transporttest.RunModes(t, transporttest.Modes{
		New:    func() plugins.Transport { return simpletcp.New() },
		Binary: transporttest.BuildPlugin(t, "github.com/kvconnect/kvconnect/examples/transport-plugin/cmd/kvconnect-transport-simpletcp"),
	})
}
