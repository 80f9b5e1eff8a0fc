package host

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/kvconnect/kvconnect/errdefs"
	"github.com/kvconnect/kvconnect/internal/shm"
	"github.com/kvconnect/kvconnect/internal/testbin"
)

func TestMain(m *testing.M) {
	// The first build creates testbin's directory: do it before any test
	// points TMPDIR at a directory of its own.
	if _, err := testbin.Build("./plugins/host/testdata/silent", "silent"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	testbin.Main(m)
}

// buildTestdata builds plugins/host/testdata/<name> (once per test process).
func buildTestdata(t *testing.T, name string) string {
	t.Helper()
	return build(t, "./plugins/host/testdata/"+name, name)
}

// build builds the package pkg (relative to the module root) as name.
func build(t *testing.T, pkg, name string) string {
	t.Helper()
	bin, err := testbin.Build(pkg, name)
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// newSegment is a shared-memory segment freed when the test ends.
func newSegment(t *testing.T, size int) *shm.Segment {
	t.Helper()
	seg, err := shm.New("plugins-test", size)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { seg.Close() })
	return seg
}

// isolate gives the test its own TMPDIR, so that go-plugin's socket
// directories land where the test can check they are removed, and checks
// at the end that no plugin process and no socket directory is left.
//
// The directory's path is short (not t.TempDir's, named after the test),
// so that plugin sockets go under this process's own directory
// (socketdir.go) as they do in /tmp: a longer TMPDIR makes the host fall
// back to TMPDIR itself.
func isolate(t *testing.T) {
	t.Helper()
	tmp, err := os.MkdirTemp("", "kvh")
	if err != nil {
		t.Fatal(err)
	}
	if len(tmp)+len("/kvconnect-plugins.4194304.9999999999") > maxSocketBase {
		t.Fatalf("the temporary directory %s is too long for the host's socket directory under it: set TMPDIR to a shorter one", tmp)
	}
	t.Setenv("TMPDIR", tmp)
	t.Cleanup(func() { os.RemoveAll(tmp) })
	t.Cleanup(func() {
		assertNoChildren(t)
		ents, err := os.ReadDir(tmp)
		if err != nil {
			t.Error(err)
		}
		for _, e := range ents {
			t.Errorf("left behind in TMPDIR: %s", e.Name())
		}
	})
}

// assertNoChildren fails if this test process has a child process (alive
// or not yet reaped) after a short grace period.
func assertNoChildren(t *testing.T) {
	t.Helper()
	var kids []string
	for deadline := time.Now().Add(testbin.WaitLimit); ; {
		kids = children(t)
		if len(kids) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(kids) > 0 {
		t.Errorf("child processes left behind: %v", kids)
	}
}

func children(t *testing.T) []string {
	files, _ := filepath.Glob("/proc/self/task/*/children")
	if len(files) == 0 {
		t.Log("no /proc/self/task/*/children: cannot check for leftover processes")
		return nil
	}
	var out []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // the thread went away
		}
		for _, pid := range strings.Fields(string(b)) {
			comm, _ := os.ReadFile("/proc/" + pid + "/comm")
			out = append(out, pid+" "+strings.TrimSpace(string(comm)))
		}
	}
	return out
}

// launchFails launches cfg, expects a failure, checks that it is an
// *errdefs.InitError for the step with the sentinels, and logs the diagnosis the
// way an operator sees it.
func launchFails(t *testing.T, cfg LaunchConfig, step string, sentinels ...error) *errdefs.InitError {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = zaptest.NewLogger(t)
	}
	start := time.Now()
	p, err := Launch(t.Context(), cfg)
	took := time.Since(start)
	if err == nil {
		p.Close(t.Context())
		t.Fatalf("Launch succeeded (pid %d), want a %s failure", p.Pid(), step)
	}
	var ie *errdefs.InitError
	if !errors.As(err, &ie) {
		t.Fatalf("Launch error %T %v, want *errdefs.InitError", err, err)
	}
	t.Logf("after %v:\n%s", took.Round(time.Millisecond), diagnosis(ie))
	if ie.Transport != cfg.Name {
		t.Errorf("plugins.Transport %q, want %q", ie.Transport, cfg.Name)
	}
	if ie.Step != step {
		t.Errorf("Step %q, want %q", ie.Step, step)
	}
	for _, s := range sentinels {
		if !errors.Is(err, s) {
			t.Errorf("errors.Is(err, %v) = false", s)
		}
	}
	if ie.Cause == "" || len(ie.Hints) == 0 {
		t.Errorf("want a cause and hints: %#v", ie)
	}
	for _, h := range ie.Hints {
		if strings.TrimSpace(h) == "" {
			t.Errorf("empty hint in %q", ie.Hints)
		}
	}
	return ie
}

// diagnosis renders an errdefs.InitError as an operator reads it.
func diagnosis(ie *errdefs.InitError) string {
	var b strings.Builder
	b.WriteString(ie.Error())
	for _, h := range ie.Hints {
		b.WriteString("\n  hint: " + h)
	}
	return b.String()
}

func wantContains(t *testing.T, what, s string, subs ...string) {
	t.Helper()
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			t.Errorf("%s does not contain %q:\n%s", what, sub, s)
		}
	}
}
