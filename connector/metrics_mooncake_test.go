package connector_test

import (
	"context"
	"strings"
	"testing"

	"github.com/kvconnect/kvconnect/connector"
)

// TestMetricsMooncakePeers: an unmodified Mooncake Transfer Engine that
// writes into and reads from a node shows in the node's served metrics
// and Mooncake connection count (counted in its tcp plugin); a node that
// opens a Mooncake target counts it opened and connected.
func TestMetricsMooncakePeers(t *testing.T) {
	validator := mooncakeBin(t, "transfer_engine_validator")
	node := metricsNode(t, connector.Config{})
	alloc(t, node, 64<<20)
	out, code := mooncake(t, validator, nil, mooncakeArgs(node.SessionID(), "--block_size=65536", "--batch_size=16", "--threads=2", "--duration=1")...)
	if code != 0 || strings.Count(out, "Data validation passed") != 2 {
		t.Fatalf("validator exited %d:\n%s", code, out)
	}
	f := scrape(t, node)
	if v := f.Value("kvconnect_mooncake_connections_served_total", "transport", "tcp"); v < 1 {
		t.Errorf("Mooncake connections served: %v after a Mooncake validator run", v)
	}
	for _, op := range []string{"write", "read"} {
		if v := f.Value("kvconnect_served_bytes_total", "transport", "tcp", "op", op, "result", "completed"); v == 0 || int64(v)%65536 != 0 {
			t.Errorf("served %s bytes %v after the validator's 64KiB blocks\n%s", op, v, f.Dump("kvconnect_served"))
		}
	}
	want(t, f, 0, "kvconnect_refusals_total", "reason", "out_of_bounds")

	c := metricsNode(t, connector.Config{})
	session, _ := mooncakeTarget(t, c)
	if _, err := c.Open(context.Background(), session); err != nil {
		t.Fatal(err)
	}
	f = scrape(t, c)
	if v := f.Value("kvconnect_mooncake_peers_opened_total"); v < 1 {
		t.Errorf("Mooncake peers opened: %v", v)
	}
	want(t, f, 1, "kvconnect_peers_connected", "transport", "tcp", "kind", "mooncake")
}
