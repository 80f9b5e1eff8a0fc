package metrics

import (
	"context"
	"sync"
	"time"
)

// askAll calls call for each transport concurrently, each bounded by
// StatsTimeout, and returns the answers it gave, by index, where keep is
// true. A call that ignores its deadline does not hold the scrape: what
// has not answered StatsTimeout (plus 100 ms) after the start is left
// out, and its late answer dropped.
func askAll[T any](transports []TransportState, call func(ctx context.Context, ts TransportState) (v T, keep bool)) map[int]T {
	answers := map[int]T{}
	var wg sync.WaitGroup
	var mu sync.Mutex
	late := false
	for i, ts := range transports {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), StatsTimeout)
			defer cancel()
			v, keep := call(ctx, ts)
			if !keep {
				return
			}
			mu.Lock()
			if !late {
				answers[i] = v
			}
			mu.Unlock()
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	timer := time.NewTimer(StatsTimeout + 100*time.Millisecond)
	select {
	case <-done:
	case <-timer.C:
	}
	timer.Stop()
	mu.Lock()
	late = true
	out := make(map[int]T, len(answers))
	for i, v := range answers {
		out[i] = v
	}
	mu.Unlock()
	return out
}
