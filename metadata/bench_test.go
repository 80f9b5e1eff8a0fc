package metadata

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/kvconnect/kvconnect/internal/testservers"
)

// BenchmarkScale is the scale check of docs/METADATA.md: 1,000 nodes (each
// its own Service, etcd client and lease) publish their descriptor into a
// real etcd; then 10 other nodes (publishing too, so their only background
// requests are lease renewals) each resolve every segment once (the first
// resolve reads the key and starts its watch), then resolve 10,000 random
// segments between them, all at once. It reports publish and resolve
// latency percentiles and etcd Range RPCs per resolve, counted by etcd
// itself. Run it once:
//
//	go test -run '^$' -bench BenchmarkScale -benchtime 1x ./metadata
//
// KVCONNECT_BENCH_NODES and KVCONNECT_BENCH_RESOLVES change the sizes.
func BenchmarkScale(b *testing.B) {
	nodes, resolves := envInt("KVCONNECT_BENCH_NODES", 1000), envInt("KVCONNECT_BENCH_RESOLVES", 10000)
	const resolvers = 10
	e := testservers.StartEtcd(b, testservers.EtcdOptions{})
	ctx := context.Background()
	segment := func(i int) string { return fmt.Sprintf("10.%d.%d.%d:15001", i>>16&255, i>>8&255, i&255) }
	for iter := 0; b.Loop(); iter++ {
		cluster := fmt.Sprintf("bench%d", iter)
		open := func() Service {
			s, err := Open(ctx, Options{URL: e.URL(), ClusterID: cluster, ConnectTimeout: 10 * time.Second})
			if err != nil {
				b.Fatal(err)
			}
			return s
		}
		var wg sync.WaitGroup
		sem := make(chan struct{}, 16)
		parallel := func(n int, f func(i int)) {
			for i := range n {
				wg.Add(1)
				sem <- struct{}{}
				go func() {
					defer wg.Done()
					defer func() { <-sem }()
					f(i)
				}()
			}
			wg.Wait()
		}

		// Publish: nodes opened 16 at a time, then each Publish timed alone.
		pubs := make([]Service, nodes)
		parallel(nodes, func(i int) { pubs[i] = open() })
		pubLat := make([]time.Duration, nodes)
		startPub := time.Now()
		for i, s := range pubs {
			t0 := time.Now()
			if err := s.Publish(ctx, segment(i), descriptor(segment(i), 1), rpcOf(15001)); err != nil {
				b.Fatal(err)
			}
			pubLat[i] = time.Since(t0)
		}
		pubTotal := time.Since(startPub)

		rs := make([]Service, resolvers)
		for i := range rs {
			rs[i] = open()
			seg := fmt.Sprintf("resolver-%d", i)
			if err := rs[i].Publish(ctx, seg, descriptor(seg, 1), rpcOf(14000+i)); err != nil {
				b.Fatal(err)
			}
		}
		// resolveAll runs every resolver at once, each resolving the
		// segments pick gives it, and returns the latencies and the Range
		// RPCs etcd served meanwhile.
		resolveAll := func(count int, pick func(r, k int) int) ([]time.Duration, float64, time.Duration) {
			ranges := e.RangeRequests(b)
			lat := make([][]time.Duration, len(rs))
			errs := make(chan error, len(rs))
			start := time.Now()
			for r, s := range rs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for k := range count {
						seg := segment(pick(r, k))
						t0 := time.Now()
						if _, err := s.Resolve(ctx, seg); err != nil {
							errs <- err
							return
						}
						lat[r] = append(lat[r], time.Since(t0))
					}
				}()
			}
			wg.Wait()
			took := time.Since(start)
			close(errs)
			for err := range errs {
				b.Fatal(err)
			}
			var all []time.Duration
			for _, l := range lat {
				all = append(all, l...)
			}
			return all, e.RangeRequests(b) - ranges, took
		}
		// One more node resolves every segment once, alone: the first
		// resolve without contention.
		solo := open()
		if err := solo.Publish(ctx, "solo", descriptor("solo", 1), rpcOf(13999)); err != nil {
			b.Fatal(err)
		}
		var soloLat []time.Duration
		for i := range nodes {
			t0 := time.Now()
			if _, err := solo.Resolve(ctx, segment(i)); err != nil {
				b.Fatal(err)
			}
			soloLat = append(soloLat, time.Since(t0))
		}
		coldLat, coldRanges, coldTotal := resolveAll(nodes, func(r, k int) int { return (k + r*nodes/resolvers) % nodes })
		rngs := make([]*rand.Rand, resolvers)
		for r := range rngs {
			rngs[r] = rand.New(rand.NewPCG(uint64(r), uint64(iter)))
		}
		hotLat, hotRanges, hotTotal := resolveAll(resolves/resolvers, func(r, _ int) int { return rngs[r].IntN(nodes) })
		var hits, n uint64
		for _, s := range rs {
			st := s.Status()
			hits, n = hits+st.CacheHits, n+st.Resolves
		}

		b.StopTimer()
		closeStart := time.Now()
		all := append(append(pubs, rs...), solo)
		parallel(len(all), func(i int) { all[i].Close(ctx) })
		closeTotal := time.Since(closeStart)
		b.StartTimer()

		pct := func(d []time.Duration, q float64) time.Duration {
			s := slices.Clone(d)
			slices.Sort(s)
			return s[min(len(s)-1, int(q*float64(len(s))))]
		}
		us := func(d time.Duration) float64 { return float64(d) / 1e3 }
		b.ReportMetric(us(pct(pubLat, 0.5)), "publish-p50-µs")
		b.ReportMetric(us(pct(pubLat, 0.99)), "publish-p99-µs")
		b.ReportMetric(us(pct(soloLat, 0.99)), "first-resolve-alone-p99-µs")
		b.ReportMetric(us(pct(coldLat, 0.99)), "first-resolve-p99-µs")
		b.ReportMetric(us(pct(hotLat, 0.5)), "resolve-p50-µs")
		b.ReportMetric(us(pct(hotLat, 0.99)), "resolve-p99-µs")
		b.ReportMetric(hotRanges/float64(len(hotLat)), "etcd-reads/resolve")
		r := func(d time.Duration) time.Duration { return d.Round(time.Microsecond) }
		b.Logf("publish: %d nodes in %s, p50 %s p99 %s max %s", nodes, pubTotal.Round(time.Millisecond),
			r(pct(pubLat, 0.5)), r(pct(pubLat, 0.99)), r(slices.Max(pubLat)))
		b.Logf("first resolves, one node alone: %d, p50 %s p99 %s max %s", len(soloLat), r(pct(soloLat, 0.5)), r(pct(soloLat, 0.99)), r(slices.Max(soloLat)))
		b.Logf("first resolves: %d (%d resolvers x %d segments, at once) in %s, p50 %s p99 %s max %s, etcd Range RPCs %.0f (%.3f per resolve)",
			len(coldLat), resolvers, nodes, coldTotal.Round(time.Millisecond), r(pct(coldLat, 0.5)), r(pct(coldLat, 0.99)),
			r(slices.Max(coldLat)), coldRanges, coldRanges/float64(len(coldLat)))
		b.Logf("repeated resolves: %d in %s, p50 %s p99 %s max %s, etcd Range RPCs %.0f (%.4f per resolve); cache hits %d of %d resolves in all",
			len(hotLat), hotTotal.Round(time.Millisecond), r(pct(hotLat, 0.5)), r(pct(hotLat, 0.99)), r(slices.Max(hotLat)),
			hotRanges, hotRanges/float64(len(hotLat)), hits, n)
		b.Logf("close: %d Services (leases revoked, watches stopped) in %s", len(all), closeTotal.Round(time.Millisecond))
	}
}

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}
