package pluginrpc

import (
	"fmt"
	"io"
	"log"
	"os"
	"strings"
	"sync"

	"github.com/hashicorp/go-hclog"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// PluginLogger returns the logger a plugin process writes to stderr, in
// the JSON shape go-plugin parses on the host (@level, @message,
// @timestamp), so each line reaches the host's zap logger with its fields.
func PluginLogger(w zapcore.WriteSyncer, level string) *zap.Logger {
	enc := zapcore.NewJSONEncoder(zapcore.EncoderConfig{
		MessageKey:     "@message",
		LevelKey:       "@level",
		TimeKey:        "@timestamp",
		NameKey:        "@module",
		EncodeLevel:    zapcore.LowercaseLevelEncoder,
		EncodeTime:     zapcore.TimeEncoderOfLayout("2006-01-02T15:04:05.000000Z07:00"),
		EncodeDuration: zapcore.StringDurationEncoder,
	})
	lvl := zapcore.InfoLevel
	if l, err := zapcore.ParseLevel(level); err == nil && level != "" {
		lvl = l
	}
	return zap.New(zapcore.NewCore(enc, w, lvl))
}

// StderrSyncer is the plugin process's locked stderr.
func StderrSyncer() zapcore.WriteSyncer { return zapcore.Lock(zapcore.AddSync(os.Stderr)) }

// HCLogZap adapts a zap logger to the hclog.Logger go-plugin logs to, so a
// plugin's log lines land in the host's zap logger under the plugin's name.
//
// It is safe for concurrent use. Detach ends it and every logger derived
// from it (With, Named, ResetNamed, StandardLogger): go-plugin's client
// leaves goroutines behind Client.Kill (the reader of the plugin's gRPC
// stdio stream, which logs when the stream ends), and what they log must
// not reach a zap logger its owner has closed, or a test's that has
// ended.
type HCLogZap struct {
	z    *zap.Logger
	name string
	args []any
	g    *logGate // shared with every logger derived from this one
}

// logGate is the detach switch of an HCLogZap family. Writes hold it for
// reading, so Detach, taking it for writing, waits for those in progress.
type logGate struct {
	mu       sync.RWMutex
	detached bool
}

var _ hclog.Logger = (*HCLogZap)(nil)

// NewHCLogZap returns the adapter for z, named name.
func NewHCLogZap(z *zap.Logger, name string) *HCLogZap {
	return &HCLogZap{z: z.Named(name), name: name, g: new(logGate)}
}

// Detach drops whatever l and the loggers derived from it log from now
// on. It waits for a line being written, so once it returns nothing more
// reaches l's zap logger. It is idempotent.
func (l *HCLogZap) Detach() {
	l.g.mu.Lock()
	l.g.detached = true
	l.g.mu.Unlock()
}

// write runs w unless l is detached; Detach waits for it.
func (l *HCLogZap) write(w func()) {
	l.g.mu.RLock()
	defer l.g.mu.RUnlock()
	if !l.g.detached {
		w()
	}
}

// moduleKey is where a plugin's JSON log line carries the name of the
// logger that wrote it (pluginLogger's NameKey).
const moduleKey = "@module"

// fields turns hclog's key/value args into zap fields. A line forwarded
// from a plugin names its logger in moduleKey: that becomes part of the
// zap logger's name instead of a field.
func (l *HCLogZap) fields(args []any) (module string, out []zap.Field) {
	all := append(append([]any{}, l.args...), args...)
	out = make([]zap.Field, 0, len(all)/2+1)
	for i := 0; i < len(all); i += 2 {
		if i+1 >= len(all) {
			out = append(out, zap.Any("EXTRA_VALUE_AT_END", all[i]))
			break
		}
		key, ok := all[i].(string)
		if !ok {
			key = fmt.Sprint(all[i])
		}
		switch key {
		case "timestamp":
			continue // zap stamps its own time
		case moduleKey:
			if m, ok := all[i+1].(string); ok && m != "" {
				module = m
				continue
			}
		}
		out = append(out, zap.Any(key, all[i+1]))
	}
	return module, out
}

func (l *HCLogZap) Log(level hclog.Level, msg string, args ...any) {
	var lvl zapcore.Level
	switch level {
	case hclog.Trace, hclog.Debug:
		lvl = zapcore.DebugLevel
	case hclog.Info, hclog.NoLevel:
		lvl = zapcore.InfoLevel
	case hclog.Warn:
		lvl = zapcore.WarnLevel
	default:
		lvl = zapcore.ErrorLevel
	}
	if !l.z.Core().Enabled(lvl) {
		return
	}
	module, fields := l.fields(args)
	z := l.z
	if module != "" {
		z = z.Named(module)
	}
	l.write(func() { z.Log(lvl, msg, fields...) })
}

func (l *HCLogZap) Trace(msg string, args ...any) { l.Log(hclog.Trace, msg, args...) }
func (l *HCLogZap) Debug(msg string, args ...any) { l.Log(hclog.Debug, msg, args...) }
func (l *HCLogZap) Info(msg string, args ...any)  { l.Log(hclog.Info, msg, args...) }
func (l *HCLogZap) Warn(msg string, args ...any)  { l.Log(hclog.Warn, msg, args...) }
func (l *HCLogZap) Error(msg string, args ...any) { l.Log(hclog.Error, msg, args...) }

func (l *HCLogZap) IsTrace() bool { return l.z.Core().Enabled(zapcore.DebugLevel) }
func (l *HCLogZap) IsDebug() bool { return l.z.Core().Enabled(zapcore.DebugLevel) }
func (l *HCLogZap) IsInfo() bool  { return l.z.Core().Enabled(zapcore.InfoLevel) }
func (l *HCLogZap) IsWarn() bool  { return l.z.Core().Enabled(zapcore.WarnLevel) }
func (l *HCLogZap) IsError() bool { return l.z.Core().Enabled(zapcore.ErrorLevel) }

func (l *HCLogZap) ImpliedArgs() []any { return l.args }
func (l *HCLogZap) With(args ...any) hclog.Logger {
	return &HCLogZap{z: l.z, name: l.name, args: append(append([]any{}, l.args...), args...), g: l.g}
}
func (l *HCLogZap) Name() string { return l.name }
func (l *HCLogZap) Named(name string) hclog.Logger {
	return &HCLogZap{z: l.z.Named(name), name: l.name + "." + name, args: l.args, g: l.g}
}
func (l *HCLogZap) ResetNamed(name string) hclog.Logger {
	return &HCLogZap{z: l.z.Named(name), name: name, args: l.args, g: l.g}
}
func (l *HCLogZap) SetLevel(hclog.Level) {}
func (l *HCLogZap) GetLevel() hclog.Level {
	switch {
	case l.z.Core().Enabled(zapcore.DebugLevel):
		return hclog.Trace
	case l.z.Core().Enabled(zapcore.InfoLevel):
		return hclog.Info
	case l.z.Core().Enabled(zapcore.WarnLevel):
		return hclog.Warn
	}
	return hclog.Error
}
func (l *HCLogZap) StandardLogger(*hclog.StandardLoggerOptions) *log.Logger {
	return log.New(l.StandardWriter(nil), "", 0)
}
func (l *HCLogZap) StandardWriter(*hclog.StandardLoggerOptions) io.Writer {
	return writerFunc(func(p []byte) (int, error) {
		l.write(func() { l.z.Info(strings.TrimRight(string(p), "\n")) })
		return len(p), nil
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
