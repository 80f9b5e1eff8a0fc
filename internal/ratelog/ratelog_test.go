package ratelog

import (
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

func TestLimiter(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	l := New(zap.New(core), time.Second)
	clock := time.Unix(1000, 0)
	l.now = func() time.Time { return clock }
	for i := 0; i < 100; i++ {
		l.Warn("bad-frame", "malformed request", zap.Int("i", i))
	}
	l.Warn("other", "another kind")
	if n := logs.Len(); n != 2 {
		t.Fatalf("%d lines for 101 events of two kinds in one interval, want 2", n)
	}
	clock = clock.Add(1500 * time.Millisecond)
	l.Warn("bad-frame", "malformed request")
	all := logs.AllUntimed()
	last := all[len(all)-1].ContextMap()
	if last["suppressed"] != int64(99) {
		t.Fatalf("the line after the interval says %v suppressed, want 99", last["suppressed"])
	}
	// A flood of distinct keys stays bounded.
	for i := 0; i < 10*maxKinds; i++ {
		l.Warn(string(rune(i)), "x")
	}
	if len(l.kinds) > maxKinds {
		t.Fatalf("%d keys remembered", len(l.kinds))
	}
}
