package connector_test

import (
	"context"
	"fmt"
	"log"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvconnect/kvconnect/connector"
)

// An embedder registers each node's collectors on its own registry,
// telling nodes apart with a label; nothing goes to the default registry.
// Serve reg with promhttp.HandlerFor as the rest of the program's metrics.
func ExampleWithMetrics() {
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	cfg := connector.Config{Protocol: "tcp", Hostname: "127.0.0.1"}
	decode, err := connector.New(ctx, cfg, connector.WithInProcess("tcp"),
		connector.WithMetrics(prometheus.WrapRegistererWith(prometheus.Labels{"node": "decode"}, reg)))
	if err != nil {
		log.Fatal(err)
	}
	defer decode.Close()
	prefill, err := connector.New(ctx, cfg, connector.WithInProcess("tcp"),
		connector.WithMetrics(prometheus.WrapRegistererWith(prometheus.Labels{"node": "prefill"}, reg)))
	if err != nil {
		log.Fatal(err)
	}
	defer prefill.Close()

	kv, _ := decode.Alloc(ctx, 1<<20)
	block, _ := prefill.Alloc(ctx, 64<<10)
	peer, _ := prefill.Open(ctx, decode.SessionID())
	if err := prefill.Transfer(ctx, peer, connector.Op{Kind: connector.OpWrite,
		LocalRegion: block.ID(), RemoteRegion: kv.ID(), Length: 64 << 10}); err != nil {
		log.Fatal(err)
	}

	fams, _ := reg.Gather()
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["op"] == "write" && labels["result"] == "completed" && m.GetCounter().GetValue() > 0 &&
				(f.GetName() == "kvconnect_initiated_bytes_total" || f.GetName() == "kvconnect_served_bytes_total") {
				fmt.Printf("%s{node=%q} %v\n", f.GetName(), labels["node"], m.GetCounter().GetValue())
			}
		}
	}
	// Output:
	// kvconnect_initiated_bytes_total{node="prefill"} 65536
	// kvconnect_served_bytes_total{node="decode"} 65536
}
