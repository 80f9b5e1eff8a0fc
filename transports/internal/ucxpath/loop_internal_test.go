package ucxpath

import (
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/kvconnect/kvconnect/units"
)

// While UCX reports events it never delivers (a wedged shared-memory
// FIFO), the loop sleeps between polls instead of spinning, and says so
// once after op_timeout.
func TestBackoffWhenStuck(t *testing.T) {
	var slept []time.Duration // backoff's sleeps, recorded instead of slept
	backoffSleep = func(d time.Duration) { slept = append(slept, d) }
	t.Cleanup(func() { backoffSleep = time.Sleep })
	core, logs := observer.New(zap.ErrorLevel)
	l := &loop{name: "ucx", opts: Options{OpTimeout: units.Duration(100 * time.Millisecond)}, log: zap.New(core)}
	t0 := time.Now()
	l.backoff(true, t0) // first busy round: no sleep
	if len(slept) != 0 {
		t.Fatalf("first busy round slept %v", slept)
	}
	l.backoff(true, t0.Add(20*time.Millisecond))
	if len(slept) != 1 || slept[0] != time.Millisecond {
		t.Fatalf("stuck for 20ms: slept %v, want 1ms", slept)
	}
	l.backoff(true, t0.Add(200*time.Millisecond))
	l.backoff(true, t0.Add(300*time.Millisecond))
	if n := logs.Len(); n != 1 {
		t.Fatalf("%d error logs, want one after op_timeout", n)
	}
	l.backoff(false, t0.Add(301*time.Millisecond)) // progress resets the streak
	slept = nil
	l.backoff(true, t0.Add(302*time.Millisecond))
	if len(slept) != 0 || !l.stuckSince.Equal(t0.Add(302*time.Millisecond)) {
		t.Fatalf("after progress the streak restarts: slept %v, since %v", slept, l.stuckSince)
	}
}
