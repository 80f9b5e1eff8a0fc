package host

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-plugin/runner"
)

// procRunner runs the plugin process for go-plugin (runner.Runner) and
// records what diagnoses need: the exec error, the first bytes of stdout,
// the end of stderr, whether the host killed the process, and how it ended.
type procRunner struct {
	ctx       context.Context
	cmd       *exec.Cmd
	socketDir string // go-plugin's directory for the plugin's socket
	// socketBase holds socketDir: this process's (socketdir.go), released
	// once by removeSocketDir.
	socketBase string
	removeOnce sync.Once
	stdout     *recorder
	stderr     io.ReadCloser
	tail       *tailBuffer
	done       chan struct{} // closed once the process has been waited for and its output read
	reaped     chan struct{} // closed once the process has been waited for (set by Start)

	mu        sync.Mutex
	attempted bool // go-plugin called Start
	pid       int
	execErr   error
	killed    bool // the host sent SIGKILL (go-plugin on a failed handshake, Close, or a canceled ctx)
	canceled  bool
	st        *os.ProcessState
	waitErr   error
	outR      *os.File // the output's read ends, once reaped
	errR      *os.File
	cutOutput *time.Timer // closes them if go-plugin does not finish reading
}

var _ runner.Runner = (*procRunner)(nil)

func (r *procRunner) Start(context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.attempted = true
	if err := r.ctx.Err(); err != nil {
		r.canceled = true
		return err
	}
	// The output reaches go-plugin through pipes of our own: a process the
	// plugin started (a helper, a shell wrapper's background job) can keep
	// them open after the plugin exited, and go-plugin reaps the plugin
	// only once it read both to their end. reap closes our read ends
	// outputHeld after the exit if go-plugin has not finished by then.
	outR, outW, err := os.Pipe()
	if err != nil {
		r.execErr = err
		return err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		r.execErr = err
		return err
	}
	r.cmd.Stdout, r.cmd.Stderr = outW, errW
	r.stdout, r.stderr = &recorder{r: outR, max: 1024}, errR
	err = startOnForker(r.ctx, r.cmd)
	outW.Close() // the child has its copies (or never will)
	errW.Close()
	if err != nil {
		r.execErr = err
		outR.Close()
		errR.Close()
		return err
	}
	r.pid = r.cmd.Process.Pid
	r.reaped = make(chan struct{})
	go r.reap(outR, errR)
	return nil
}

// startOnForker starts cmd on the forker: a goroutine locked to a thread
// of its own for the life of the process. The plugin's parent-death
// signal (bindToParent) fires when the thread that forked it ends, not
// the process, and Go ends a thread whenever a goroutine locked to it
// returns without unlocking (a caller's, or UCX's and libfabric's
// progress loops here): a plugin started from any thread but one that
// never ends could die with a healthy host (golang/go#27505).
func startOnForker(ctx context.Context, cmd *exec.Cmd) error {
	done := make(chan error, 1)
	select {
	case forker <- forkRequest{cmd, done}:
	case <-ctx.Done(): // the forker is busy with a start that hangs (an exec on a stuck mount)
		return ctx.Err()
	}
	return <-done
}

type forkRequest struct {
	cmd  *exec.Cmd
	done chan error
}

// forker is served from package initialization on (an idle goroutine,
// parked): started lazily, it would show as a goroutine a test's first
// plugin launch left behind.
var forker = func() chan forkRequest {
	ch := make(chan forkRequest)
	go func() {
		runtime.LockOSThread() // never unlocked: this thread lives as long as the process
		for r := range ch {
			r.done <- r.cmd.Start()
		}
	}()
	return ch
}()

// outputHeld is how long after the plugin's exit its output may stay
// open (held by a process it started) before the host stops reading it.
const outputHeld = 2 * time.Second

// reap waits for the process, and arms what closes the output's read
// ends outputHeld later if go-plugin has not read them to their end by
// then (a process the plugin started holds the pipes, or go-plugin
// stopped reading): that ends go-plugin's readers, which then call Wait.
func (r *procRunner) reap(outR, errR *os.File) {
	err := r.cmd.Wait()
	r.mu.Lock()
	r.st, r.waitErr = r.cmd.ProcessState, err
	r.outR, r.errR = outR, errR
	r.cutOutput = time.AfterFunc(outputHeld, func() {
		r.tail.Write([]byte("[kvconnect: the plugin exited, but its stdout/stderr stayed open (a process it started holds them?); stopped reading them]\n"))
		outR.Close()
		errR.Close()
	})
	r.mu.Unlock()
	close(r.reaped)
}

// Wait is go-plugin's: it calls it once it read the output to its end.
// Our read ends are closed here (exec closes only pipes it made), before
// go-plugin's Kill, and so the host's Close, returns.
func (r *procRunner) Wait(context.Context) error {
	<-r.reaped
	r.mu.Lock()
	err := r.waitErr
	r.cutOutput.Stop()
	r.outR.Close()
	r.errR.Close()
	r.mu.Unlock()
	close(r.done)
	return err
}

// exitGrace is how long Kill lets a plugin whose stdout has closed finish
// exiting on its own, so that its own exit status is what gets diagnosed.
const exitGrace = 2 * time.Second

func (r *procRunner) Kill(context.Context) error {
	r.mu.Lock()
	out := r.stdout
	r.mu.Unlock()
	// A closed stdout usually means the process is exiting (tearing down
	// a large address space can take a while): let it finish rather than
	// kill it and lose how it ended.
	if out != nil && out.sawEOF() {
		t := time.NewTimer(exitGrace)
		select {
		case <-r.done:
		case <-t.C:
		}
		t.Stop()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.killLocked()
}

func (r *procRunner) killLocked() error {
	if r.pid == 0 || r.st != nil {
		return nil
	}
	r.killed = true
	if err := r.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	return nil
}

// cancel kills the process because the caller's ctx ended.
func (r *procRunner) cancel() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.canceled = true
	_ = r.killLocked()
}

func (r *procRunner) Stdout() io.ReadCloser                            { return r.stdout }
func (r *procRunner) Stderr() io.ReadCloser                            { return r.stderr }
func (r *procRunner) Name() string                                     { return r.cmd.Path }
func (r *procRunner) Diagnose(context.Context) string                  { return "" }
func (r *procRunner) PluginToHost(n, a string) (string, string, error) { return n, a, nil }
func (r *procRunner) HostToPlugin(n, a string) (string, string, error) { return n, a, nil }

func (r *procRunner) ID() string {
	if pid := r.pidValue(); pid != 0 {
		return strconv.Itoa(pid)
	}
	return ""
}

func (r *procRunner) pidValue() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pid
}

func (r *procRunner) startError() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.execErr
}

func (r *procRunner) wasCanceled() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.canceled
}

func (r *procRunner) wasAttempted() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.attempted
}

func (r *procRunner) wasKilled() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.killed
}

// state is how the process ended, or nil while it runs (or never ran).
func (r *procRunner) state() *os.ProcessState {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.st
}

// waitState waits up to d for the process to be reaped and returns how it
// ended, or nil.
func (r *procRunner) waitState(d time.Duration) *os.ProcessState {
	if r.pidValue() == 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-r.done:
	case <-t.C:
	}
	return r.state()
}

// removeSocketDir removes the plugin's socket directory (go-plugin
// does too, except when the process never got an ID) and ends this
// plugin's use of the process's base directory. Idempotent.
func (r *procRunner) removeSocketDir() {
	r.removeOnce.Do(func() {
		if r.socketDir != "" {
			os.RemoveAll(r.socketDir)
		}
		socketDirs.release(r.socketBase)
	})
}

// recorder passes a plugin's stdout to go-plugin and keeps its first max
// bytes: the handshake line, or whatever a program that is not a plugin
// printed instead.
type recorder struct {
	r   io.ReadCloser
	max int

	mu  sync.Mutex
	buf []byte
	eof bool
}

func (c *recorder) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.mu.Lock()
	if room := c.max - len(c.buf); n > 0 && room > 0 {
		c.buf = append(c.buf, p[:min(n, room)]...)
	}
	if err != nil {
		c.eof = true
	}
	c.mu.Unlock()
	return n, err
}

// sawEOF reports whether reading stdout ended (the plugin closed it,
// usually by exiting).
func (c *recorder) sawEOF() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.eof
}

func (c *recorder) Close() error { return c.r.Close() }

// String is everything recorded.
func (c *recorder) String() string {
	if c == nil {
		return ""
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return string(c.buf)
}

// firstLine is the first line printed (trimmed) and whether it ended.
func (c *recorder) firstLine() (string, bool) {
	s := c.String()
	line, _, complete := strings.Cut(s, "\n")
	return strings.TrimSpace(line), complete
}

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
