package plugins

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

// pluginLogger returns the logger a plugin process writes to stderr, in
// the JSON shape go-plugin parses on the host (@level, @message,
// @timestamp), so each line reaches the host's zap logger with its fields.
func pluginLogger(w zapcore.WriteSyncer, level string) *zap.Logger {
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

func stderrSyncer() zapcore.WriteSyncer { return zapcore.Lock(zapcore.AddSync(os.Stderr)) }

// hclogZap adapts a zap logger to the hclog.Logger go-plugin logs to, so a
// plugin's log lines land in the host's zap logger under the plugin's name.
type hclogZap struct {
	z    *zap.Logger
	name string
	args []any
}

var _ hclog.Logger = (*hclogZap)(nil)

func newHCLogZap(z *zap.Logger, name string) *hclogZap {
	return &hclogZap{z: z.Named(name), name: name}
}

// moduleKey is where a plugin's JSON log line carries the name of the
// logger that wrote it (pluginLogger's NameKey).
const moduleKey = "@module"

// fields turns hclog's key/value args into zap fields. A line forwarded
// from a plugin names its logger in moduleKey: that becomes part of the
// zap logger's name instead of a field.
func (l *hclogZap) fields(args []any) (module string, out []zap.Field) {
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

func (l *hclogZap) Log(level hclog.Level, msg string, args ...any) {
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
	z.Log(lvl, msg, fields...)
}

func (l *hclogZap) Trace(msg string, args ...any) { l.Log(hclog.Trace, msg, args...) }
func (l *hclogZap) Debug(msg string, args ...any) { l.Log(hclog.Debug, msg, args...) }
func (l *hclogZap) Info(msg string, args ...any)  { l.Log(hclog.Info, msg, args...) }
func (l *hclogZap) Warn(msg string, args ...any)  { l.Log(hclog.Warn, msg, args...) }
func (l *hclogZap) Error(msg string, args ...any) { l.Log(hclog.Error, msg, args...) }

func (l *hclogZap) IsTrace() bool { return l.z.Core().Enabled(zapcore.DebugLevel) }
func (l *hclogZap) IsDebug() bool { return l.z.Core().Enabled(zapcore.DebugLevel) }
func (l *hclogZap) IsInfo() bool  { return l.z.Core().Enabled(zapcore.InfoLevel) }
func (l *hclogZap) IsWarn() bool  { return l.z.Core().Enabled(zapcore.WarnLevel) }
func (l *hclogZap) IsError() bool { return l.z.Core().Enabled(zapcore.ErrorLevel) }

func (l *hclogZap) ImpliedArgs() []any { return l.args }
func (l *hclogZap) With(args ...any) hclog.Logger {
	return &hclogZap{z: l.z, name: l.name, args: append(append([]any{}, l.args...), args...)}
}
func (l *hclogZap) Name() string { return l.name }
func (l *hclogZap) Named(name string) hclog.Logger {
	return &hclogZap{z: l.z.Named(name), name: l.name + "." + name, args: l.args}
}
func (l *hclogZap) ResetNamed(name string) hclog.Logger {
	return &hclogZap{z: l.z.Named(name), name: name, args: l.args}
}
func (l *hclogZap) SetLevel(hclog.Level) {}
func (l *hclogZap) GetLevel() hclog.Level {
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
func (l *hclogZap) StandardLogger(*hclog.StandardLoggerOptions) *log.Logger {
	return log.New(l.StandardWriter(nil), "", 0)
}
func (l *hclogZap) StandardWriter(*hclog.StandardLoggerOptions) io.Writer {
	return writerFunc(func(p []byte) (int, error) {
		l.z.Info(strings.TrimRight(string(p), "\n"))
		return len(p), nil
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// tailBuffer keeps the last max bytes written to it: the end of a
// plugin's stderr, quoted when the plugin dies before its handshake.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.max {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.buf))
}
