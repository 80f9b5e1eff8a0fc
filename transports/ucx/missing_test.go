//go:build linux && cgo

package ucx_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kvconnect/kvconnect/errdefs"
	ucxlib "github.com/kvconnect/kvconnect/internal/ucx"
	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/plugins/host"
	"github.com/kvconnect/kvconnect/transports/ucx"
)

// The missing-library tests run a copy of this test binary in a new mount
// namespace in which libucp.so.0 is hidden (or replaced by an empty file),
// and check what Init says there, in-process and from the plugin binary.

const (
	envHideMode   = "KVCONNECT_UCX_TEST_HIDE"   // "missing" or "broken"
	envHidePlugin = "KVCONNECT_UCX_TEST_PLUGIN" // plugin binary to launch inside
	envHideTmp    = "KVCONNECT_UCX_TEST_TMP"    // empty directory the helper mounts a tmpfs on
	resultPrefix  = "HIDE-RESULT: "
)

// hideResult is what the helper reports for one way of running Init.
type hideResult struct {
	Err         string `json:"err"`
	Kind        string `json:"kind"`
	InitError   bool   `json:"init_error"`
	Step        string `json:"step"`
	NativeName  string `json:"native_name"`
	Hints       string `json:"hints"`
	Unavailable bool   `json:"unavailable"`
}

type hideReport struct {
	InProcess hideResult `json:"in_process"`
	Plugin    hideResult `json:"plugin"`
	Setup     string     `json:"setup"`
}

// libDir is the directory the loader finds libucp.so.0 in.
func libDir() string {
	for _, d := range []string{"/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib"} {
		if _, err := os.Stat(filepath.Join(d, ucxlib.Library)); err == nil {
			return d
		}
	}
	return ""
}

func TestMissingLibraryDiagnosis(t *testing.T) {
	dir := libDir()
	if dir == "" {
		t.Fatalf("%s not found in the usual library directories: install %s (make deps)", ucxlib.Library, ucxlib.DebianPackage)
	}
	bin := pluginBinary(t)
	for _, mode := range []string{"missing", "broken"} {
		t.Run(mode, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, os.Args[0])
			cmd.Env = append(os.Environ(), envHideMode+"="+mode, envHidePlugin+"="+bin, envHideTmp+"="+t.TempDir())
			cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
			out, err := cmd.CombinedOutput()
			if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EINVAL) {
				t.Skipf("cannot create a mount namespace here (unshare(CLONE_NEWNS) needs CAP_SYS_ADMIN): %v", err)
			}
			if err != nil {
				t.Fatalf("helper: %v\n%s", err, out)
			}
			var rep hideReport
			for _, line := range strings.Split(string(out), "\n") {
				if s, ok := strings.CutPrefix(line, resultPrefix); ok {
					if err := json.Unmarshal([]byte(s), &rep); err != nil {
						t.Fatalf("helper result %q: %v", s, err)
					}
				}
			}
			if rep.Setup != "" {
				t.Fatalf("helper could not hide the library: %s\n%s", rep.Setup, out)
			}
			for what, r := range map[string]hideResult{"in-process": rep.InProcess, "plugin": rep.Plugin} {
				t.Logf("%s Init with %s %s:\n    %s\n    hints: %s", what, ucxlib.Library, mode, r.Err, r.Hints)
				if !r.Unavailable || r.Kind != "unavailable" {
					t.Errorf("%s: error %q does not wrap ErrUnavailable (kind %q): the fallback chain would not move on", what, r.Err, r.Kind)
				}
				if !r.InitError || r.Step != plugins.StepLoadLibrary || r.NativeName != "dlopen" {
					t.Errorf("%s: want an *InitError at step %q (dlopen), got init_error=%v step=%q native=%q", what, plugins.StepLoadLibrary, r.InitError, r.Step, r.NativeName)
				}
				if !strings.Contains(r.Err, ucxlib.Library) || !strings.Contains(r.Err, ucxlib.DebianPackage) || !strings.Contains(r.Hints, "apt-get install "+ucxlib.DebianPackage) {
					t.Errorf("%s: the diagnosis must name %s and the package %s: %q / hints %q", what, ucxlib.Library, ucxlib.DebianPackage, r.Err, r.Hints)
				}
			}
		})
	}
}

func init() { helpers = append(helpers, hideHelper) }

// hideHelper is TestMissingLibraryDiagnosis's helper process, inside its
// own mount namespace: it hides the library, runs Init in-process and in
// the plugin binary, and prints what they said.
func hideHelper() bool {
	mode := os.Getenv(envHideMode)
	if mode == "" {
		return false
	}
	var rep hideReport
	defer func() {
		b, _ := json.Marshal(rep)
		fmt.Println(resultPrefix + string(b))
	}()
	if err := hideLibrary(os.Getenv(envHideTmp), libDir(), mode); err != nil {
		rep.Setup = err.Error()
		return true
	}
	opts := []byte(`{"tls":"tcp"}`)
	rep.InProcess = describe(ucx.New().Init(context.Background(), plugins.InitRequest{Hostname: "127.0.0.1", Options: opts}))
	p, err := host.Launch(context.Background(), host.LaunchConfig{Name: "ucx", Path: os.Getenv(envHidePlugin)})
	if err != nil {
		rep.Plugin = describe(plugins.InitResult{}, err)
		return true
	}
	defer p.Close(context.Background())
	rep.Plugin = describe(p.Init(context.Background(), plugins.InitRequest{Hostname: "127.0.0.1", Options: opts}))
	return true
}

func describe(_ plugins.InitResult, err error) hideResult {
	r := hideResult{Kind: errdefs.Kind(err), Unavailable: errors.Is(err, plugins.ErrUnavailable)}
	if err == nil {
		r.Err = "<nil>: Init succeeded although the library was hidden"
		return r
	}
	r.Err = err.Error()
	var ie *plugins.InitError
	if errors.As(err, &ie) {
		r.InitError, r.Step, r.NativeName, r.Hints = true, ie.Step, ie.NativeName, strings.Join(ie.Hints, "; ")
	}
	return r
}

// hideLibrary makes libucp.so.0 disappear from dir (mode "missing") or
// turn into an empty file ("broken") in this mount namespace: dir is bind
// mounted aside, and a directory of symlinks to everything else in it is
// bind mounted over dir. Everything lives on a tmpfs mounted on tmp (an
// empty directory the parent owns), and nothing is ever removed here:
// removing the aside mount's contents would remove the host's libraries.
func hideLibrary(tmp, dir, mode string) error {
	if tmp == "" || dir == "" {
		return fmt.Errorf("no scratch directory (%q) or library directory (%q)", tmp, dir)
	}
	if err := unix.Mount("tmpfs", tmp, "tmpfs", 0, "size=16m"); err != nil {
		return fmt.Errorf("mount tmpfs on %s: %w", tmp, err)
	}
	orig, view := filepath.Join(tmp, "orig"), filepath.Join(tmp, "view")
	for _, d := range []string{orig, view} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return err
		}
	}
	if err := unix.Mount(dir, orig, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind mount %s: %w", dir, err)
	}
	entries, err := os.ReadDir(orig)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "libucp.so") {
			continue
		}
		if err := os.Symlink(filepath.Join(orig, e.Name()), filepath.Join(view, e.Name())); err != nil {
			return err
		}
	}
	if mode == "broken" {
		if err := os.WriteFile(filepath.Join(view, ucxlib.Library), nil, 0o644); err != nil {
			return err
		}
	}
	if err := unix.Mount(view, dir, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind mount over %s: %w", dir, err)
	}
	if _, err := os.Stat(filepath.Join(dir, ucxlib.Library)); mode == "missing" && err == nil {
		return fmt.Errorf("%s still visible in %s", ucxlib.Library, dir)
	}
	return nil
}
