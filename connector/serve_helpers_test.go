package connector_test

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/kvconnect/kvconnect/internal/testbin"
)

// served is a `kvconnect serve` process (with its plugins) in a process
// group of its own, so a signal to the group reaches its plugins too.
type served struct {
	Session string
	PGID    int
	cmd     *exec.Cmd
	done    chan struct{}
}

// serve starts `kvconnect serve --alloc 1MiB` plus args, wrapped by wrap
// (nil: run directly; a netns host's Command to run it there), waits for
// its status line, and stops it when the test ends.
func serve(t *testing.T, wrap func(name string, args ...string) *exec.Cmd, args ...string) *served {
	t.Helper()
	cli, err := testbin.Build("./cmd/kvconnect", "kvconnect")
	if err != nil {
		t.Fatal(err)
	}
	if wrap == nil {
		wrap = exec.Command
	}
	args = append([]string{"serve", "--alloc", "1MiB", "--plugin-dir", pluginDir(t), "--log-level", "warn"}, args...)
	cmd := wrap(cli, args...)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &served{PGID: cmd.Process.Pid, cmd: cmd, done: make(chan struct{})}
	go func() { cmd.Wait(); close(s.done) }()
	t.Cleanup(s.stop)
	sc := bufio.NewScanner(out)
	if !sc.Scan() {
		<-s.done
		t.Fatalf("the node printed no status (exit: %v)", cmd.ProcessState)
	}
	var st struct {
		Session string `json:"session"`
	}
	if err := json.Unmarshal(sc.Bytes(), &st); err != nil {
		t.Fatalf("node status %q: %v", sc.Text(), err)
	}
	go func() {
		for sc.Scan() {
		}
	}()
	s.Session = st.Session
	return s
}

// stop ends the node cleanly (SIGINT), or kills its group after 10 s.
func (s *served) stop() {
	syscall.Kill(-s.PGID, syscall.SIGCONT)
	s.cmd.Process.Signal(os.Interrupt)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		s.kill()
	}
}

// kill SIGKILLs the node and its plugins and waits for the node.
func (s *served) kill() {
	syscall.Kill(-s.PGID, syscall.SIGKILL)
	<-s.done
}
