package tcp_test

import (
	"net"
	"strconv"
	"testing"

	"github.com/kvconnect/kvconnect/auth"
	"github.com/kvconnect/kvconnect/internal/testbin"
	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/plugins/transporttest"
	"github.com/kvconnect/kvconnect/transports/tcp"
)

func TestMain(m *testing.M) {
	testbin.Main(m)
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

// TestConformanceAuthenticated runs the suite with authentication on
// (every data connection proves the secret), in process and over
// in-memory gRPC (the keyring crosses the plugin protocol), including the
// Authentication test: strangers are refused. The plugin process itself
// is TestConformance's; with authentication, TestConformanceAuthenticatedPlugin.
func TestConformanceAuthenticated(t *testing.T) {
	transporttest.RunModes(t, transporttest.Modes{
		New:  func() plugins.Transport { return tcp.New() },
		Auth: conformanceKeyring(t),
	})
}

// TestConformanceAuthenticatedPlugin is TestConformanceAuthenticated
// with the plugin binary.
func TestConformanceAuthenticatedPlugin(t *testing.T) {
	testbin.Long(t, "the conformance suite once more as plugin processes")
	transporttest.Run(t, transporttest.Harness{
		New:  transporttest.Plugin(testbin.MustBuild(t, "./cmd/kvconnect-transport-tcp", "kvconnect-transport-tcp")),
		Auth: conformanceKeyring(t),
	})
}

func conformanceKeyring(t *testing.T) *auth.Keyring {
	k, err := auth.NewKeyring("conformance-secret-0123456789")
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// mooncakeEndpoint makes a node's peers speak Mooncake's TCP data
// protocol (version v) to its data port instead of kvconnect's framing.
func mooncakeEndpoint(t *testing.T, v int) func([]byte) []byte {
	return func(ep []byte) []byte {
		host, port, err := net.SplitHostPort(string(ep))
		if err != nil {
			t.Fatalf("tcp endpoint %q: %v", ep, err)
		}
		p, _ := strconv.Atoi(port)
		return tcp.MooncakeEndpoint(host, p, v)
	}
}

// TestConformanceOverMooncakeProtocol runs the whole suite between two tcp
// transports speaking Mooncake's TCP data protocol (v2) to each other:
// the Mooncake client and the Mooncake server side of the tcp transport,
// in process (behind the plugin protocol:
// TestConformanceOverMooncakeProtocolPlugin).
func TestConformanceOverMooncakeProtocol(t *testing.T) {
	transporttest.Run(t, transporttest.Harness{
		New:          transporttest.InProcess(func() plugins.Transport { return tcp.New() }),
		PeerEndpoint: mooncakeEndpoint(t, 2),
	})
}

// TestConformanceOverMooncakeProtocolPlugin is
// TestConformanceOverMooncakeProtocol behind the plugin protocol: over
// in-memory gRPC and with the plugin binary.
func TestConformanceOverMooncakeProtocolPlugin(t *testing.T) {
	testbin.Long(t, "the conformance suite once more behind the plugin protocol")
	bin := testbin.MustBuild(t, "./cmd/kvconnect-transport-tcp", "kvconnect-transport-tcp")
	t.Run("InMemoryGRPC", func(t *testing.T) {
		transporttest.Run(t, transporttest.Harness{
			New:          transporttest.InMemoryGRPC(func() plugins.Transport { return tcp.New() }),
			PeerEndpoint: mooncakeEndpoint(t, 2),
		})
	})
	t.Run("Plugin", func(t *testing.T) {
		transporttest.Run(t, transporttest.Harness{New: transporttest.Plugin(bin), PeerEndpoint: mooncakeEndpoint(t, 2)})
	})
}
