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
// (every data connection proves the secret), in every mode, including
// the Authentication test: strangers are refused.
func TestConformanceAuthenticated(t *testing.T) {
	bin, err := testbin.Build("./cmd/kvconnect-transport-tcp", "kvconnect-transport-tcp")
	if err != nil {
		t.Fatal(err)
	}
	k, err := auth.NewKeyring("conformance-secret-0123456789")
	if err != nil {
		t.Fatal(err)
	}
	transporttest.RunModes(t, transporttest.Modes{
		New:    func() plugins.Transport { return tcp.New() },
		Binary: bin,
		Auth:   k,
	})
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
// in-process and as plugins.
func TestConformanceOverMooncakeProtocol(t *testing.T) {
	bin, err := testbin.Build("./cmd/kvconnect-transport-tcp", "kvconnect-transport-tcp")
	if err != nil {
		t.Fatal(err)
	}
	transporttest.RunModes(t, transporttest.Modes{
		New:          func() plugins.Transport { return tcp.New() },
		Binary:       bin,
		PeerEndpoint: mooncakeEndpoint(t, 2),
	})
}
