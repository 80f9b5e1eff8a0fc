package metrics_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/kvconnect/kvconnect/metrics"
	"github.com/kvconnect/kvconnect/plugins"
)

// BenchmarkBatchRecording is what metrics add to one batch on the data
// path: BatchStarted and BatchDone for a batch of 1 and of 128 ops.
//
//	go test -run '^$' -bench BenchmarkBatchRecording ./metrics
func BenchmarkBatchRecording(b *testing.B) {
	for _, n := range []int{1, 128} {
		b.Run(map[int]string{1: "1op", 128: "128ops"}[n], func(b *testing.B) {
			m := metrics.NewNode(metrics.SourceFunc(func() metrics.Snapshot { return metrics.Snapshot{} }), metrics.Options{})
			ops := make([]plugins.Op, n)
			for i := range ops {
				ops[i] = plugins.Op{Kind: plugins.OpWrite, Length: 4096}
			}
			res := make([]plugins.OpResult, n)
			b.ReportAllocs()
			for b.Loop() {
				m.BatchStarted("tcp", "10.0.0.2:15001", n)
				m.BatchDone("tcp", "10.0.0.2:15001", ops, res, 30*time.Microsecond)
			}
		})
	}
}

// BenchmarkProcessCollector is what the process_* series cost a scrape:
// this package's collector beside client_golang's, gathered alone.
//
//	go test -run '^$' -bench BenchmarkProcessCollector -count 10 ./metrics
func BenchmarkProcessCollector(b *testing.B) {
	for _, tc := range []struct {
		name string
		c    func() prometheus.Collector
	}{
		{"kvconnect", metrics.NewProcessCollector},
		{"client_golang", func() prometheus.Collector {
			return collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			reg := prometheus.NewRegistry()
			reg.MustRegister(tc.c())
			b.ReportAllocs()
			for b.Loop() {
				if _, err := reg.Gather(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
