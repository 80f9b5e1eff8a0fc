package connector_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/kvconnect/kvconnect/connector"
	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/transports"
	"github.com/kvconnect/kvconnect/transports/ucx"
)

// TestRegionRegisteredAfterConnecting: a region a peer registers after this
// node connected to it is reached over tcp (the target checks addresses
// itself), but not over ucx, which addresses regions by the keys of the
// descriptor it got when it connected; that failure says so, rather than a
// bare "unknown region".
func TestRegionRegisteredAfterConnecting(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		protocol string
		reached  bool
	}{{"tcp", true}, {"ucx", false}} {
		t.Run(tc.protocol, func(t *testing.T) {
			cat := transports.Builtin().WithFactory("ucx", func() plugins.Transport { return ucx.New() })
			node := func() *connector.Connector {
				c, err := connector.New(ctx, connector.Config{Protocol: tc.protocol, PluginDir: pluginDir(t),
					Transports: map[string]map[string]any{"ucx": {"tls": "tcp"}}},
					connector.WithCatalog(cat), connector.WithInProcess("ucx"), connector.WithLogger(zaptest.NewLogger(t)))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { c.Close() })
				return c
			}
			a, b := node(), node()
			src, first := alloc(t, a, 1<<20), alloc(t, b, 1<<20)
			if err := a.TransferSyncWrite(ctx, b.SessionID(), src.Addr(), first.Addr(), 4096); err != nil {
				t.Fatal(err)
			}
			late := alloc(t, b, 1<<20)
			err := a.TransferSyncWrite(ctx, b.SessionID(), src.Addr(), late.Addr(), 4096)
			if tc.reached {
				if err != nil {
					t.Fatalf("a WRITE to a region the peer registered after the connection: %v", err)
				}
				return
			}
			if !errors.Is(err, connector.ErrUnknownRegion) || !strings.Contains(err.Error(), "registered since") || !strings.Contains(err.Error(), "reconnects") {
				t.Fatalf("a WRITE over %s to a region the peer registered after the connection: %v; want ErrUnknownRegion saying why", tc.protocol, err)
			}
		})
	}
}
