package tcp

import (
	"context"
	"strings"
	"testing"
	"time"
	"unsafe"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/kvconnect/kvconnect/plugins"
)

// A registration's prefault may use half of the time left before its
// deadline, none once the deadline has passed.
func TestHalfway(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		deadline, want time.Time
	}{
		{now.Add(30 * time.Second), now.Add(15 * time.Second)},
		{now.Add(time.Millisecond), now.Add(500 * time.Microsecond)},
		{now, now},
		{now.Add(-time.Second), now},
	} {
		if got := halfway(now, tc.deadline); !got.Equal(tc.want) {
			t.Errorf("halfway(now, now%+v) = now%+v, want now%+v", tc.deadline.Sub(now), got.Sub(now), tc.want.Sub(now))
		}
	}
}

// A prefault slow enough to show in a node's start-up is logged at info
// level, naming the option that moves it; a quick one only at debug.
func TestSlowPrefaultIsLogged(t *testing.T) {
	for _, tc := range []struct {
		name      string
		threshold time.Duration
		level     zapcore.Level
	}{
		{"slow", 0, zapcore.InfoLevel},
		{"quick", time.Hour, zapcore.DebugLevel},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old := slowPrefault
			slowPrefault = tc.threshold
			t.Cleanup(func() { slowPrefault = old })
			core, logs := observer.New(zapcore.DebugLevel)
			tr := New()
			ctx := context.Background()
			if _, err := tr.Init(ctx, plugins.InitRequest{Hostname: "127.0.0.1", Logger: zap.New(core)}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { tr.Close(ctx) })
			mem := make([]byte, 3*4096)
			if _, err := tr.RegisterRegion(ctx, plugins.Region{ID: 1, Addr: uint64(uintptr(unsafe.Pointer(&mem[0]))), Mem: mem}); err != nil {
				t.Fatal(err)
			}
			found := logs.FilterMessageSnippet("region prefaulted").All()
			if len(found) != 1 || found[0].Level != tc.level || !strings.Contains(found[0].Message, "transports.tcp.prefault") {
				t.Fatalf("prefault log lines %+v, want one at %v naming transports.tcp.prefault", found, tc.level)
			}
		})
	}
}
