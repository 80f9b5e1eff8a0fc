package host

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-plugin"
	"github.com/kvconnect/kvconnect/errdefs"
	"github.com/kvconnect/kvconnect/internal/pluginrpc"
	"github.com/kvconnect/kvconnect/plugins"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Plugin is a running transport plugin process. It implements plugins.Transport
// by gRPC; Close also ends the process.
type Plugin struct {
	*grpcClient
	name   string
	path   string
	client *plugin.Client
	proc   *procRunner
	host   *pluginrpc.FDSender
	log    *zap.Logger
	// goLog is what go-plugin logs to; detached once the process is
	// reaped, since go-plugin's stdio reader outlives Client.Kill.
	goLog *pluginrpc.HCLogZap

	exited    chan struct{}
	closeMu   sync.Mutex
	closed    bool
	closeDone chan struct{} // closed when the first Close returns
	watchEnd  chan struct{}
}

var _ plugins.Transport = (*Plugin)(nil)

// watch closes p.exited when the plugin process goes away: its end of the
// fd channel closes then and our read returns.
func (p *Plugin) watch(c interface{ Read([]byte) (int, error) }) {
	defer close(p.watchEnd)
	var b [8]byte
	for {
		if _, err := c.Read(b[:]); err != nil {
			break
		}
	}
	close(p.exited)
	p.closeMu.Lock()
	closed := p.closed
	p.closeMu.Unlock()
	if !closed {
		p.log.Error("transport plugin process exited unexpectedly", zap.String("path", p.path))
	}
}

// crashReason reports whether the plugin process has gone, waiting briefly
// for the exit to be noticed (a broken gRPC stream usually comes first).
// The sentinel is errdefs.ErrClosed when the host closed the plugin itself,
// errdefs.ErrTransportCrashed when the process died on its own.
func (p *Plugin) crashReason() (string, error) {
	select {
	case <-p.exited:
	case <-time.After(500 * time.Millisecond):
		return "", nil
	}
	p.closeMu.Lock()
	closed := p.closed
	p.closeMu.Unlock()
	if closed {
		return "the plugin was closed", errdefs.ErrClosed
	}
	why := fmt.Sprintf("the plugin process (%s) exited", p.path)
	if st := p.proc.waitState(200 * time.Millisecond); st != nil {
		_, _, ended := exitInfo(st)
		why = fmt.Sprintf("the plugin process (%s) %s", p.path, ended)
	}
	return why, errdefs.ErrTransportCrashed
}

// Info asks the plugin about its transport. If the plugin process dies
// meanwhile, the error is an *errdefs.InitError like Init's.
func (p *Plugin) Info(ctx context.Context) (plugins.Info, error) {
	info, err := p.grpcClient.Info(ctx)
	if err != nil && errors.Is(err, errdefs.ErrTransportCrashed) {
		return info, p.crashError("info", err)
	}
	return info, err
}

// Init brings the plugin's transport up. When the plugin process dies
// during Init, the error is an *errdefs.InitError with step errdefs.StepInitPluginCrash,
// the process's exit status or signal, the end of its stderr, and Err
// wrapping errdefs.ErrUnavailable and errdefs.ErrTransportCrashed.
func (p *Plugin) Init(ctx context.Context, req plugins.InitRequest) (plugins.InitResult, error) {
	res, err := p.grpcClient.Init(ctx, req)
	if err != nil && errors.Is(err, errdefs.ErrTransportCrashed) {
		return res, p.crashError("init", err)
	}
	return res, err
}

func (p *Plugin) crashError(call string, err error) *errdefs.InitError {
	ie := &errdefs.InitError{
		Transport: p.name, Step: errdefs.StepInitPluginCrash,
		Err: fmt.Errorf("%w: %w", errdefs.ErrUnavailable, errdefs.ErrTransportCrashed),
	}
	var cause string
	if st := p.proc.waitState(2 * time.Second); st != nil {
		var ended string
		ie.NativeCode, ie.NativeName, ended = exitInfo(st)
		cause = fmt.Sprintf("the plugin process (%s) %s during %s", p.path, ended, call)
	} else {
		cause = fmt.Sprintf("the connection to the plugin process (%s) broke during %s and the process did not exit: %v", p.path, call, err)
	}
	if tail := lastLines(p.StderrTail(), stderrQuoteLines); tail != "" {
		cause += "; its stderr ends with:\n" + indent(tail)
	}
	ie.Cause = cause
	ie.Hints = []string{
		"this is a bug in the plugin or in a library or driver it calls: report it to the plugin's author with the stderr above",
		"meanwhile, configure a fallback transport (fallback) or another protocol",
	}
	return ie
}

// StderrTail returns the end of what the plugin process wrote on stderr
// (up to 8 KiB, trimmed), for diagnoses. Complete once the process has
// exited.
func (p *Plugin) StderrTail() string { return p.proc.tail.String() }

// Exited is closed when the plugin process has gone.
func (p *Plugin) Exited() <-chan struct{} { return p.exited }

// Ended waits up to d for the plugin process to be reaped and its output
// read to the end (so StderrTail is complete), and says how it ended:
// "exited with status 2", "was killed by SIGSEGV (segmentation fault)".
// It is "" when that is not known within d (the process still runs).
func (p *Plugin) Ended(d time.Duration) string {
	if p.proc.pidValue() == 0 {
		return ""
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.proc.done:
	case <-t.C:
	}
	if st := p.proc.state(); st != nil {
		_, _, ended := exitInfo(st)
		return ended
	}
	return ""
}

// Pid is the plugin process id, or 0 if unknown.
func (p *Plugin) Pid() int { return p.proc.pidValue() }

// Path is the plugin binary that was started.
func (p *Plugin) Path() string { return p.path }

// Close asks the transport to close, then ends the plugin process and
// releases the fd channel. It is idempotent; when it returns the process
// has been reaped and nothing of the plugin logs to the host's logger any
// more. A Close while another is under way waits for it (or for its own
// ctx, then ErrTimeout or ErrCanceled) and returns nil.
func (p *Plugin) Close(ctx context.Context) error {
	p.closeMu.Lock()
	if p.closed {
		p.closeMu.Unlock()
		select {
		case <-p.closeDone:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("plugin %s: waiting for another Close: %w", p.name, errdefs.FromContext(ctx.Err()))
		}
	}
	p.closed = true
	p.closeMu.Unlock()
	defer close(p.closeDone)
	// The Close request is bounded, also when ctx has no deadline: a
	// plugin that stopped answering (SIGSTOP, wedged in a driver call)
	// must not hold it, and so Close, forever. kill has a bound of its own.
	var err error
	if p.grpcClient != nil {
		select {
		case <-p.exited:
		default:
			cctx, cancel := context.WithTimeout(ctx, killWait)
			err = p.grpcClient.Close(cctx)
			cancel()
			if errors.Is(err, errdefs.ErrTransportCrashed) || errors.Is(err, errdefs.ErrClosed) {
				// It is going away either way: a process that died during
				// Close is reported as closed (p.closed is set).
				err = nil
			}
		}
	}
	if p.grpcClient != nil {
		p.closeRing() // gone with the process, if Close was not called
	}
	kctx, cancel := context.WithTimeout(ctx, killWait)
	p.kill(kctx)
	cancel()
	p.goLog.Detach()
	p.host.Close()
	<-p.watchEnd
	p.proc.removeSocketDir()
	return err
}

// killWait bounds how long Close waits for the plugin to close and end
// its process its own way (the Close request, go-plugin's shutdown
// request, then up to 2 s for the process to exit) before SIGKILL, when
// ctx has no earlier end.
var killWait = 10 * time.Second // a variable for tests

// kill ends the plugin process. go-plugin's Kill first asks the plugin
// to shut down over gRPC, with no time limit: a plugin that stopped
// answering (wedged in a driver call, stopped by a signal) would hold it,
// and Close, forever. So once ctx ends or killWait passes, the process
// gets SIGKILL, which fails that request and lets Kill finish.
func (p *Plugin) kill(ctx context.Context) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.client.Kill()
	}()
	select {
	case <-done:
		return
	case <-ctx.Done(): // Close bounds it with killWait
	}
	p.log.Warn("the transport plugin did not shut down when asked; killing it", zap.String("path", p.path), zap.Int("pid", p.Pid()))
	p.proc.mu.Lock()
	_ = p.proc.killLocked()
	p.proc.mu.Unlock()
	<-done
}

func levelName(l *zap.Logger) string {
	for _, lvl := range []zapcore.Level{zapcore.DebugLevel, zapcore.InfoLevel, zapcore.WarnLevel} {
		if l.Core().Enabled(lvl) {
			return lvl.String()
		}
	}
	return "error"
}
