// Package testservers starts real etcd and Redis servers for tests, as
// child processes on free loopback ports with temporary data directories,
// and stops and removes them when the test ends. A test is skipped only
// when the server's binary is missing (the message names the Debian
// package; `make deps` installs it).
//
// The servers die with the test process (Pdeathsig on Linux), log to a
// buffer shown when a start fails, and are ready when returned (etcd's
// /health answers, Redis answers PING). Methods are for one test
// goroutine at a time unless they say otherwise.
package testservers

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// proc is one run of a server process.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the process was reaped
	err  error         // its exit status, after done
	log  *tailBuffer
}

// tailBuffer keeps the last max bytes written to it; safe for concurrent use.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
	max int
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if len(b.buf) > b.max {
		b.buf = append([]byte(nil), b.buf[len(b.buf)-b.max:]...)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(bytes.TrimSpace(b.buf))
}

// startProc starts bin with args; the process is killed if the test
// process dies.
func startProc(bin string, args []string, log *tailBuffer) (*proc, error) {
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = sysProcAttr()
	cmd.Env = os.Environ()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &proc{cmd: cmd, done: make(chan struct{}), log: log}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// exited says whether the process has exited.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends sig and waits for the process to exit, SIGKILLing it after
// 10 s.
func (p *proc) stop(sig syscall.Signal) {
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// freePorts returns n distinct free loopback ports. Another process may
// take one before the server binds it; starters retry then.
func freePorts(n int) ([]int, error) {
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// lookBinary finds a server binary or skips the test, naming the package.
func lookBinary(t testing.TB, name, pkg string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	for _, dir := range []string{"/usr/bin", "/usr/sbin", "/usr/local/bin"} {
		p := dir + "/" + name
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p
		}
	}
	t.Skipf("%s is not installed: install the Debian package %s (make deps does)", name, pkg)
	return ""
}

// waitReady polls ready every 10 ms until it succeeds, the process exits
// or timeout passes.
func waitReady(p *proc, timeout time.Duration, ready func() error) error {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		if last = ready(); last == nil {
			return nil
		}
		if p.exited() {
			return fmt.Errorf("exited before it was ready (%v)", p.err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %s: %v", timeout, last)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// portTaken says whether a failed start looks like a port that was taken
// between freePorts and the bind.
func portTaken(log string) bool {
	return strings.Contains(log, "address already in use")
}

var errPortTaken = errors.New("a port was taken before the server bound it")
