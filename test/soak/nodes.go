package soak

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/kvconnect/kvconnect/internal/netns"
)

// target is a `kvconnect serve` node the initiator writes to and reads
// from. Its epoch is odd while it restarts: a cycle that saw the epoch
// change does not count (the new process's memory is new).
type target struct {
	name    string
	host    *netns.Host // nil: this namespace
	addr    string      // the address its session is on
	port    int
	args    []string
	env     []string
	session string
	data    string // its tcp data port, host:port
	epoch   atomic.Uint64

	mu       sync.Mutex
	cmd      *exec.Cmd
	done     chan struct{}
	verified atomic.Uint64 // blocks verified against it
}

func (t *target) command(name string, args ...string) *exec.Cmd {
	if t.host != nil {
		return t.host.Command(name, args...)
	}
	return exec.Command(name, args...)
}

// start runs the node and waits for its status line.
func (t *target) start(cli string) error {
	args := append([]string{"serve", "--rpc-port", strconv.Itoa(t.port), "--hostname", t.addr}, t.args...)
	cmd := t.command(cli, args...)
	cmd.Env = append(os.Environ(), t.env...)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		if sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		for sc.Scan() {
		}
	}()
	var line string
	select {
	case line = <-lines:
	case <-time.After(30 * time.Second):
	}
	var st struct {
		Session    string `json:"session"`
		Transports []struct {
			Name    string `json:"name"`
			Summary string `json:"summary"`
		} `json:"transports"`
	}
	if line == "" || json.Unmarshal([]byte(line), &st) != nil {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		return fmt.Errorf("soak: target %s did not start (status line %q)", t.name, line)
	}
	t.mu.Lock()
	t.cmd, t.done, t.session = cmd, done, st.Session
	for _, tr := range st.Transports {
		if tr.Name == "tcp" {
			t.data = strings.TrimPrefix(tr.Summary, "tcp ")
		}
	}
	t.mu.Unlock()
	return nil
}

func (t *target) pgid() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cmd == nil {
		return 0
	}
	return t.cmd.Process.Pid
}

// kill SIGKILLs the node and its plugins.
func (t *target) kill() {
	t.mu.Lock()
	cmd, done := t.cmd, t.done
	t.cmd = nil
	t.mu.Unlock()
	if cmd == nil {
		return
	}
	syscall.Kill(-cmd.Process.Pid, syscall.SIGCONT)
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-done
}

// stop ends the node cleanly and reports how it exited.
func (t *target) stop() error {
	t.mu.Lock()
	cmd, done := t.cmd, t.done
	t.cmd = nil
	t.mu.Unlock()
	if cmd == nil {
		return nil
	}
	syscall.Kill(-cmd.Process.Pid, syscall.SIGCONT)
	cmd.Process.Signal(os.Interrupt)
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		return fmt.Errorf("soak: target %s did not stop within 15 s of SIGINT", t.name)
	}
	if !cmd.ProcessState.Success() {
		return fmt.Errorf("soak: target %s exited with %v", t.name, cmd.ProcessState)
	}
	return nil
}

// plugin returns the pid of the node's transport plugin (a child of the
// serve process), or 0.
func (t *target) plugin() int {
	pg := t.pgid()
	if pg == 0 {
		return 0
	}
	for _, pid := range childrenOf(pg) {
		exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		if strings.Contains(exe, "kvconnect-transport-") {
			return pid
		}
	}
	return 0
}
