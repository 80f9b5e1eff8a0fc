// Package logging builds the zap loggers of kvconnect's commands from the
// log_level and log_format settings.
package logging

import (
	"fmt"
	"os"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// New returns a logger writing to stderr at level ("debug", "info",
// "warn", "error") in format ("console" or "json").
func New(level, format string) (*zap.Logger, error) {
	var lvl zapcore.Level
	switch level {
	case "", "info":
		lvl = zapcore.InfoLevel
	case "debug", "warn", "error":
		lvl, _ = zapcore.ParseLevel(level)
	default:
		return nil, fmt.Errorf("log_level %q: must be one of debug, info, warn, error", level)
	}
	var enc zapcore.Encoder
	switch format {
	case "", "console":
		cfg := zap.NewDevelopmentEncoderConfig()
		cfg.EncodeTime = zapcore.TimeEncoderOfLayout("15:04:05.000")
		enc = zapcore.NewConsoleEncoder(cfg)
	case "json":
		enc = zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig())
	default:
		return nil, fmt.Errorf("log_format %q: must be console or json", format)
	}
	return zap.New(zapcore.NewCore(enc, zapcore.Lock(os.Stderr), lvl)), nil
}
