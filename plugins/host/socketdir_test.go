package host

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/kvconnect/kvconnect/internal/testbin"
)

// A host killed with its plugin running leaves go-plugin's socket
// directory behind; the next host to launch a plugin in the same
// temporary directory removes it.
func TestSocketDirOfKilledHostRemoved(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("finding a dead host's directory reads /proc: Linux only")
	}
	isolate(t)
	tmp := os.Getenv("TMPDIR")
	fake := buildTestdata(t, "fakeplugin")
	cmd := exec.Command(buildTestdata(t, "crashhost"), fake)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "ready\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("crashhost said %q, %v; want ready", line, err)
	}
	dead := filepath.Join(tmp, fmt.Sprintf("%s%d.%s", socketDirPrefix, cmd.Process.Pid, processStart(cmd.Process.Pid)))
	cmd.Process.Kill()
	cmd.Wait()
	left, _ := filepath.Glob(filepath.Join(dead, "plugin-dir*"))
	if len(left) != 1 {
		t.Fatalf("after the host's SIGKILL, %s holds %v: want the one socket directory the kill left behind", dead, left)
	}
	// The plugin dies of its parent's death (PR_SET_PDEATHSIG) a moment
	// later; until then its socket answers and the directory is kept.
	testbin.Eventually(t, "the killed host's plugin to die", func() bool { return !socketAnswers(dead) })

	p, err := Launch(t.Context(), LaunchConfig{Name: "fake", Path: fake, Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Errorf("the killed host's %s is still there after the next Launch (stat: %v)", dead, err)
	}
	own, _ := filepath.Glob(filepath.Join(tmp, socketDirPrefix+strconv.Itoa(os.Getpid())+".*", "plugin-dir*"))
	if len(own) != 1 {
		t.Errorf("this process's plugin socket directories: %v, want one", own)
	}
	if err := p.Close(context.Background()); err != nil {
		t.Error(err)
	}
	// isolate checks that Close left nothing in TMPDIR.
}

// The sweep removes only directories of this user whose process is gone.
func TestSweepSocketDirs(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("finding a dead host's directory reads /proc: Linux only")
	}
	tmp := t.TempDir()
	exited := exec.Command("true")
	if err := exited.Run(); err != nil {
		t.Fatal(err)
	}
	gonePid, parent := exited.Process.Pid, os.Getppid()
	name := func(pid int, start string) string { return fmt.Sprintf("%s%d.%s", socketDirPrefix, pid, start) }
	rows := []struct {
		name, why string
		file      bool // a file, not a directory
		otherUser bool
		// a Unix socket in its plugin-dir1: listening, or bound and closed
		listening, deadSocket bool
		gone                  bool
	}{
		{name: name(gonePid, "12345"), why: "its process exited", gone: true},
		{name: name(parent, "1"), why: "its pid now belongs to a process started later", gone: true},
		{name: name(parent, processStart(parent)), why: "its process runs"},
		{name: name(os.Getpid(), processStart(os.Getpid())), why: "it is this process's own"},
		{name: name(gonePid, "12345") + ".x", why: "the name is not one of ours"},
		{name: socketDirPrefix + "nopid.1", why: "the name has no pid"},
		{name: socketDirPrefix + "77", why: "the name has no start"},
		{name: name(gonePid, "99"), why: "it is a file", file: true},
		{name: name(gonePid, "98"), why: "another user owns it", otherUser: true},
		{name: "plugin-dir123", why: "it is go-plugin's, outside any host's directory"},
		{name: name(gonePid, "97"), why: "a socket in it answers (a host in another PID namespace)", listening: true},
		{name: name(gonePid, "96"), why: "its socket is dead", deadSocket: true, gone: true},
	}
	checked := rows[:0]
	for _, r := range rows {
		path := filepath.Join(tmp, r.name)
		if r.file {
			if err := os.WriteFile(path, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			checked = append(checked, r)
			continue
		}
		if err := os.MkdirAll(filepath.Join(path, "plugin-dir1"), 0o700); err != nil {
			t.Fatal(err)
		}
		if r.listening || r.deadSocket {
			l, err := net.Listen("unix", filepath.Join(path, "plugin-dir1", "plugin1"))
			if err != nil {
				t.Fatal(err)
			}
			if r.deadSocket {
				l.(*net.UnixListener).SetUnlinkOnClose(false)
				l.Close()
			} else {
				t.Cleanup(func() { l.Close() })
			}
		}
		if r.otherUser {
			if err := os.Chown(path, 65534, 65534); errors.Is(err, syscall.EPERM) {
				t.Logf("not root: cannot give %s to another user, so that row is not checked", r.name)
				continue
			} else if err != nil {
				t.Fatal(err)
			}
		}
		checked = append(checked, r)
	}
	sweepSocketDirs(tmp, filepath.Join(tmp, name(os.Getpid(), processStart(os.Getpid()))))
	for _, r := range checked {
		_, err := os.Lstat(filepath.Join(tmp, r.name))
		switch {
		case r.gone && err == nil:
			t.Errorf("%s: kept, want it removed: %s", r.name, r.why)
		case !r.gone && err != nil:
			t.Errorf("%s: %v, want it kept: %s", r.name, err, r.why)
		}
	}
}

// A TMPDIR too long for the host's directory and go-plugin's names under
// it still launches plugins: their sockets go in TMPDIR itself.
func TestSocketDirLongTMPDIR(t *testing.T) {
	isolate(t)
	long := os.Getenv("TMPDIR") + "/"
	long += strings.Repeat("d", 60-len(long))
	if err := os.Mkdir(long, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TMPDIR", long)
	p, err := Launch(t.Context(), LaunchConfig{Name: "fake", Path: buildTestdata(t, "fakeplugin"), Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := filepath.Glob(filepath.Join(long, "plugin-dir*")); len(got) != 1 {
		t.Errorf("go-plugin's socket directories in TMPDIR: %v, want one", got)
	}
	if err := p.Close(context.Background()); err != nil {
		t.Error(err)
	}
	if ents, _ := os.ReadDir(long); len(ents) != 0 {
		t.Errorf("left behind in TMPDIR after Close: %v", ents)
	}
	os.Remove(long)
}

// A socket base directory someone else made before this process's first
// plugin (its name is guessable from /proc) is not used: the plugin's
// socket goes in a directory go-plugin makes in TMPDIR, with a random
// name, and nothing is created inside the planted one.
func TestSocketDirPlantedIsNotUsed(t *testing.T) {
	isolate(t)
	tmp := os.Getenv("TMPDIR")
	planted := filepath.Join(tmp, fmt.Sprintf("%s%d.%s", socketDirPrefix, os.Getpid(), processStart(os.Getpid())))
	cases := []struct {
		name  string
		plant func() error
	}{
		{"open to others", func() error {
			if err := os.Mkdir(planted, 0o700); err != nil {
				return err
			}
			return os.Chmod(planted, 0o777)
		}},
		{"a symlink", func() error { return os.Symlink(t.TempDir(), planted) }},
	}
	if os.Getuid() == 0 { // root can make one that another user owns
		cases = append(cases, struct {
			name  string
			plant func() error
		}{"owned by another user", func() error {
			if err := os.Mkdir(planted, 0o700); err != nil {
				return err
			}
			return os.Chown(planted, 65534, 65534)
		}})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.plant(); err != nil {
				t.Fatal(err)
			}
			defer os.RemoveAll(planted)
			p, err := Launch(t.Context(), LaunchConfig{Name: "fake", Path: buildTestdata(t, "fakeplugin"), Logger: zaptest.NewLogger(t)})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close(context.Background())
			if filepath.Dir(p.proc.socketDir) != tmp {
				t.Errorf("socket dir %s, want one go-plugin made in TMPDIR %s", p.proc.socketDir, tmp)
			}
			if ents, _ := os.ReadDir(planted); len(ents) != 0 {
				t.Errorf("the planted directory was used: %v", ents)
			}
		})
	}
}
