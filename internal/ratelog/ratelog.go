// Package ratelog keeps log lines that remote peers can trigger (a
// malformed request, a refused connection, an accept error) from flooding
// the log: the first line of a kind is logged at once, the same kind is
// then counted for an interval, and the next line after it says how many
// were suppressed.
package ratelog

import (
	"sync"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Limiter rate-limits log lines by key. It is safe for concurrent use.
type Limiter struct {
	log      *zap.Logger
	interval time.Duration
	now      func() time.Time

	mu    sync.Mutex
	kinds map[string]*kind
}

type kind struct {
	last       time.Time
	suppressed int
}

// maxKinds bounds the keys a Limiter remembers (a hostile peer choosing
// keys cannot grow it without bound).
const maxKinds = 1024

// New returns a Limiter that logs each key at most once per interval.
func New(log *zap.Logger, interval time.Duration) *Limiter {
	return &Limiter{log: log, interval: interval, now: time.Now, kinds: map[string]*kind{}}
}

// Warn logs msg at warn level unless a line of the same key was logged
// less than an interval ago; then it is counted, and the next line of the
// key carries "suppressed": N.
func (l *Limiter) Warn(key, msg string, fields ...zap.Field) {
	l.log1(zapcore.WarnLevel, key, msg, fields)
}

// Info is Warn at info level.
func (l *Limiter) Info(key, msg string, fields ...zap.Field) {
	l.log1(zapcore.InfoLevel, key, msg, fields)
}

func (l *Limiter) log1(lvl zapcore.Level, key, msg string, fields []zap.Field) {
	if !l.log.Core().Enabled(lvl) {
		return
	}
	now := l.now()
	l.mu.Lock()
	k, ok := l.kinds[key]
	if !ok {
		if len(l.kinds) >= maxKinds {
			for old, ok := range l.kinds {
				if now.Sub(ok.last) >= l.interval {
					delete(l.kinds, old)
				}
			}
		}
		k = &kind{}
		if len(l.kinds) < maxKinds {
			l.kinds[key] = k
		}
	}
	if ok && now.Sub(k.last) < l.interval {
		k.suppressed++
		l.mu.Unlock()
		return
	}
	suppressed := k.suppressed
	k.last, k.suppressed = now, 0
	l.mu.Unlock()
	if suppressed > 0 {
		fields = append(fields, zap.Int("suppressed", suppressed), zap.Duration("suppressed_over", l.interval))
	}
	l.log.Log(lvl, msg, fields...)
}
