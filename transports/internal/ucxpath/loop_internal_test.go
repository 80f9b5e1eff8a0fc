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
	core, logs := observer.New(zap.ErrorLevel)
	l := &loop{name: "ucx", opts: Options{OpTimeout: units.Duration(100 * time.Millisecond)}, log: zap.New(core)}
	t0 := time.Now()
	l.backoff(true, t0) // first busy round: no sleep
	start := time.Now()
	l.backoff(true, t0.Add(20*time.Millisecond))
	if d := time.Since(start); d < time.Millisecond {
		t.Fatalf("stuck for 20ms: slept %v, want about 1ms", d)
	}
	l.backoff(true, t0.Add(200*time.Millisecond))
	l.backoff(true, t0.Add(300*time.Millisecond))
	if n := logs.Len(); n != 1 {
		t.Fatalf("%d error logs, want one after op_timeout", n)
	}
	l.backoff(false, t0.Add(301*time.Millisecond)) // progress resets the streak
	start = time.Now()
	l.backoff(true, t0.Add(302*time.Millisecond))
	if d := time.Since(start); d > 500*time.Microsecond || !l.stuckSince.Equal(t0.Add(302*time.Millisecond)) {
		t.Fatalf("after progress the streak restarts: slept %v, since %v", d, l.stuckSince)
	}
}
