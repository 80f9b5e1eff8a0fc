package connector_test

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvconnect/kvconnect/connector"
	"github.com/kvconnect/kvconnect/internal/testbin"
)

// BenchmarkTransferMetrics is the cost of metrics on the data path: one
// op per batch between two nodes (tcp in-process, so the transport's own
// cost is small beside it, or as a plugin), with metrics off and on (an
// embedder's registry; gathered once per b.N to include the scrape side).
//
//	go test -run '^$' -bench BenchmarkTransferMetrics -count 10 ./connector
func BenchmarkTransferMetrics(b *testing.B) {
	for _, mode := range []string{"in-process", "plugin"} {
		for _, size := range []int{4 << 10, 1 << 20} {
			for _, on := range []bool{false, true} {
				name := mode + "/" + map[int]string{4 << 10: "4KiB", 1 << 20: "1MiB"}[size] + "/metrics=" + map[bool]string{false: "off", true: "on"}[on]
				b.Run(name, func(b *testing.B) {
					ctx := context.Background()
					cfg := connector.Config{Protocol: "tcp", Hostname: "127.0.0.1"}
					var opts []connector.Option
					if mode == "in-process" {
						opts = append(opts, connector.WithInProcess("tcp"))
					} else {
						cfg.PluginDir = testbin.PluginDir(b, "tcp")
					}
					var reg *prometheus.Registry
					node := func(name string) *connector.Connector {
						o := opts
						if on {
							o = append(o, connector.WithMetrics(prometheus.WrapRegistererWith(prometheus.Labels{"node": name}, reg)))
						}
						c, err := connector.New(ctx, cfg, o...)
						if err != nil {
							b.Fatal(err)
						}
						b.Cleanup(func() { c.Close() })
						return c
					}
					if on {
						reg = prometheus.NewRegistry()
					}
					src, dst := node("a"), node("b")
					sr, err := src.Alloc(ctx, size)
					if err != nil {
						b.Fatal(err)
					}
					dr, err := dst.Alloc(ctx, size)
					if err != nil {
						b.Fatal(err)
					}
					peer, err := src.Open(ctx, dst.SessionID())
					if err != nil {
						b.Fatal(err)
					}
					op := connector.Op{Kind: connector.OpWrite, LocalRegion: sr.ID(), RemoteRegion: dr.ID(), Length: uint64(size)}
					b.SetBytes(int64(size))
					b.ResetTimer()
					for b.Loop() {
						if err := src.Transfer(ctx, peer, op); err != nil {
							b.Fatal(err)
						}
					}
					b.StopTimer()
					if reg != nil {
						if _, err := reg.Gather(); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		}
	}
}
