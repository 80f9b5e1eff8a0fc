package pluginrpc

import (
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/hashicorp/go-hclog"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"
)

func TestHCLogZapForwardsToZap(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	l := NewHCLogZap(zap.New(core), "go-plugin")

	l.Info("hello", "k", 1, "timestamp", "2026-01-01T00:00:00Z")
	l.Debug("dropped at info level")
	l.Trace("dropped too")
	l.With("plugin", "tcp").Warn("careful", "x", "y")
	l.Named("sub").Error("bad", "err", "boom")
	l.Log(hclog.NoLevel, "no level")
	l.Info("odd", "lonely")
	l.Info("not a string key", 5, "v")
	l.Info("from a plugin logger", "@module", "tcp", "peer", "10.0.0.2:15001")
	l.StandardLogger(nil).Print("standard line")

	type want struct {
		msg, logger string
		level       zapcore.Level
		fields      map[string]any
	}
	wants := []want{
		{"hello", "go-plugin", zapcore.InfoLevel, map[string]any{"k": int64(1)}},
		{"careful", "go-plugin", zapcore.WarnLevel, map[string]any{"plugin": "tcp", "x": "y"}},
		{"bad", "go-plugin.sub", zapcore.ErrorLevel, map[string]any{"err": "boom"}},
		{"no level", "go-plugin", zapcore.InfoLevel, map[string]any{}},
		{"odd", "go-plugin", zapcore.InfoLevel, map[string]any{"EXTRA_VALUE_AT_END": "lonely"}},
		{"not a string key", "go-plugin", zapcore.InfoLevel, map[string]any{"5": "v"}},
		{"from a plugin logger", "go-plugin.tcp", zapcore.InfoLevel, map[string]any{"peer": "10.0.0.2:15001"}},
		{"standard line", "go-plugin", zapcore.InfoLevel, map[string]any{}},
	}
	got := logs.AllUntimed()
	if len(got) != len(wants) {
		t.Fatalf("%d entries, want %d: %+v", len(got), len(wants), got)
	}
	for i, w := range wants {
		e := got[i]
		if e.Message != w.msg || e.LoggerName != w.logger || e.Level != w.level {
			t.Errorf("entry %d: %q logger %q level %v, want %q %q %v", i, e.Message, e.LoggerName, e.Level, w.msg, w.logger, w.level)
		}
		if m := e.ContextMap(); len(m) != len(w.fields) {
			t.Errorf("entry %d (%s): fields %v, want %v", i, e.Message, m, w.fields)
		} else {
			for k, v := range w.fields {
				if m[k] != v {
					t.Errorf("entry %d (%s): field %s = %#v, want %#v", i, e.Message, k, m[k], v)
				}
			}
		}
	}
	if l.IsDebug() || l.IsTrace() || !l.IsInfo() || !l.IsWarn() || !l.IsError() || l.GetLevel() != hclog.Info {
		t.Errorf("level queries disagree with the zap core at info: debug %v trace %v info %v level %v", l.IsDebug(), l.IsTrace(), l.IsInfo(), l.GetLevel())
	}
	if n := l.With("a", 1).Named("b"); n.Name() != "go-plugin.b" || len(n.ImpliedArgs()) != 2 {
		t.Errorf("Named/With: name %q args %v", n.Name(), n.ImpliedArgs())
	}
}

// TestHCLogZapDetach: after Detach nothing reaches zap, through the
// logger or anything derived from it, before or after the detach.
func TestHCLogZapDetach(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	l := NewHCLogZap(zap.New(core), "plugin.tcp")
	early := l.Named("stdio") // derived before the detach, as go-plugin's stdio reader is
	early.Debug("before")
	l.Detach()
	l.Detach() // idempotent
	early.Debug("received EOF, stopping recv loop")
	l.Info("after")
	l.With("k", "v").Warn("after, with")
	l.Named("broker").Error("after, named")
	l.ResetNamed("other").Info("after, reset")
	l.StandardLogger(nil).Print("after, standard")
	if got := logs.AllUntimed(); len(got) != 1 || got[0].Message != "before" {
		t.Fatalf("entries %+v, want only %q", got, "before")
	}
}

// TestHCLogZapDetachOutlivesItsTest logs to a test's logger from a
// goroutine that goes on while the test ends and after, as go-plugin's
// stdio reader does after Client.Kill. Without the detach (in the test's
// cleanup, as Plugin.Close does it) its writes race with the end of the
// test, and the race detector (make test runs with -race) reports them.
func TestHCLogZapDetachOutlivesItsTest(t *testing.T) {
	stop, done := make(chan struct{}), make(chan struct{})
	var lines atomic.Int64
	t.Run("plugin", func(t *testing.T) {
		l := NewHCLogZap(zaptest.NewLogger(t), "plugin.tcp")
		stdio := l.Named("stdio")
		t.Cleanup(l.Detach)
		go func() {
			defer close(done)
			for {
				select {
				case <-stop:
					return
				default:
				}
				stdio.Debug("received EOF, stopping recv loop")
				lines.Add(1)
			}
		}()
		for lines.Load() < 10 { // logging before the test ends, too
			runtime.Gosched()
		}
	})
	for n := lines.Load(); lines.Load() < n+100; { // and after
		runtime.Gosched()
	}
	close(stop)
	<-done
}
