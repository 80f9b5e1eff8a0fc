// Package testbin is the project's test toolkit: it builds the project's
// executables (plugin binaries, test helpers) once per test process into
// one directory (plugins/transporttest.BuildPlugin builds through it too),
// hands tests a plugin directory, waits for conditions with a generous
// bound, keeps race-built child processes from sleeping at exit, and
// leaves the long runs to make test-long.
//
// A package whose tests build or launch executables runs them through
// Main:
//
//	func TestMain(m *testing.M) { testbin.Main(m) }
package testbin

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

var (
	mu    sync.Mutex
	dir   string
	built = map[string]string{} // key: build directory, package, name
	names = map[string]string{} // binary name in dir: its key
)

// dirPrefix names the build directories in os.TempDir(), followed by the
// process id of the test process that owns one and "-".
const dirPrefix = "kvconnect-testbin-pid"

// ModuleRoot returns the directory holding go.mod, found from this file.
func ModuleRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// Build compiles the package at pkg (import path or ./relative to the
// module root) into a binary named name and returns its path. Binaries are
// built with -race when the test binary is, once per test process.
func Build(pkg, name string) (string, error) {
	return BuildIn(ModuleRoot(), pkg, name)
}

// BuildIn is Build with pkg relative to directory wd ("" for the test's
// working directory), for a module other than this one (an out-of-tree
// plugin's). Every binary of a test process lands in the same directory
// (Dir), so a plugin built here is found there by name; a second package
// built under a name already taken goes to a subdirectory.
func BuildIn(wd, pkg, name string) (string, error) {
	if wd == "" {
		var err error
		if wd, err = os.Getwd(); err != nil {
			return "", err
		}
	}
	mu.Lock()
	defer mu.Unlock()
	key := wd + "\x00" + pkg + "\x00" + name
	if p, ok := built[key]; ok {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		os.Remove(p) // moved or removed by its user: build it again
	}
	if dir == "" {
		sweep()
		d, err := os.MkdirTemp("", dirPrefix+strconv.Itoa(os.Getpid())+"-")
		if err != nil {
			return "", err
		}
		dir = d
	}
	out := filepath.Join(dir, name)
	if other, taken := names[name]; taken && other != key {
		sub, err := os.MkdirTemp(dir, name+"-")
		if err != nil {
			return "", err
		}
		out = filepath.Join(sub, name)
	} else {
		names[name] = key
	}
	if prebuilt := prebuiltBinary(wd, pkg, name); prebuilt != "" {
		if err := os.Symlink(prebuilt, out); err != nil {
			return "", err
		}
		built[key] = out
		return out, nil
	}
	args := []string{"build", "-o", out}
	if raceEnabled {
		args = append(args, "-race")
	}
	args = append(args, pkg)
	cmd := exec.Command("go", args...)
	cmd.Dir = wd
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %v\n%s", pkg, err, b)
	}
	built[key] = out
	return out, nil
}

// EnvRaceDir names a directory of this module's executables built with
// -race, each named after its package's directory (make test builds them
// once there, so the test processes need not each link their own).
const EnvRaceDir = "KVCONNECT_TESTBIN_RACE_DIR"

// EnvPlainDir names a directory of this module's executables built
// without -race (make test: bin/). The tests of a package that called
// HostSide launch those instead of race-built ones.
const EnvPlainDir = "KVCONNECT_TESTBIN_PLAIN_DIR"

// hostSide is set by HostSide.
var hostSide bool

// HostSide declares, from TestMain before Main, that the package's tests
// exercise the host side (a node, the CLI) and launch this module's
// executables (plugins, kvconnect serve) only as its peers: with
// $KVCONNECT_TESTBIN_PLAIN_DIR set they run the builds without the race
// detector found there, which start and run several times cheaper. The
// test binary keeps the race detector; the executables' own code is
// race-tested where it is the code under test (the conformance suite's
// plugin runs, plugins/host), and make test-long runs the host-side
// packages again with race-built executables.
func HostSide() {
	mu.Lock()
	defer mu.Unlock()
	hostSide = true
}

// prebuiltBinary is the executable for pkg in $KVCONNECT_TESTBIN_RACE_DIR
// (or, after HostSide, $KVCONNECT_TESTBIN_PLAIN_DIR), when the test
// binary has the race detector, pkg is a directory of this module and
// name is the directory's name; "" when there is none. The caller holds
// mu.
func prebuiltBinary(wd, pkg, name string) string {
	dir := os.Getenv(EnvRaceDir)
	if plain := os.Getenv(EnvPlainDir); hostSide && plain != "" {
		dir = plain
	}
	if dir == "" || !raceEnabled || wd != ModuleRoot() || !strings.HasPrefix(pkg, "./") || filepath.Base(pkg) != name {
		return ""
	}
	p := filepath.Join(dir, name)
	if st, err := os.Stat(p); err != nil || !st.Mode().IsRegular() {
		return ""
	}
	return p
}

// sweep removes the build directories of test processes that are gone
// without removing theirs (killed by a timeout, or a caller of BuildIn
// without Main: an out-of-tree plugin's tests).
func sweep() {
	olds, _ := filepath.Glob(filepath.Join(os.TempDir(), dirPrefix+"*"))
	for _, old := range olds {
		// Only this package's own names: kvconnect-testbin-pid<pid>-<random>.
		digits, _, ok := strings.Cut(strings.TrimPrefix(filepath.Base(old), dirPrefix), "-")
		pid, err := strconv.Atoi(digits)
		if !ok || err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			os.RemoveAll(old)
		}
	}
}

// MustBuild is Build failing t on an error.
func MustBuild(t testing.TB, pkg, name string) string {
	t.Helper()
	bin, err := Build(pkg, name)
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// PluginDir builds the transport plugins named (tcp, rdma, ...: the mains
// cmd/kvconnect-transport-<name>; every one in cmd/ when none is named)
// and returns the directory holding them, for Config.PluginDir and
// --plugin-dir.
func PluginDir(t testing.TB, transports ...string) string {
	t.Helper()
	if len(transports) == 0 {
		mains, _ := filepath.Glob(filepath.Join(ModuleRoot(), "cmd", "kvconnect-transport-*"))
		for _, m := range mains {
			if gos, _ := filepath.Glob(filepath.Join(m, "*.go")); len(gos) > 0 {
				transports = append(transports, strings.TrimPrefix(filepath.Base(m), "kvconnect-transport-"))
			}
		}
		if len(transports) == 0 {
			t.Fatal("no plugin mains under cmd/")
		}
	}
	var bin string
	for _, name := range transports {
		bin = MustBuild(t, "./cmd/kvconnect-transport-"+name, "kvconnect-transport-"+name)
	}
	return filepath.Dir(bin)
}

// Dir is the directory binaries are built into ("" before the first Build).
func Dir() string {
	mu.Lock()
	defer mu.Unlock()
	return dir
}

// Cleanup removes the built binaries. Main calls it after the tests.
func Cleanup() {
	mu.Lock()
	defer mu.Unlock()
	if dir != "" {
		os.RemoveAll(dir)
		dir = ""
		built = map[string]string{}
		names = map[string]string{}
	}
}

// QuickExit is the environment setting that keeps a race-built process
// from sleeping 1 s when it exits (the race detector's default, to flush
// its reports): plugin processes exit often in tests.
const QuickExit = "GORACE=atexit_sleep_ms=0"

// Main runs the tests of m with QuickExit in the environment every child
// process inherits (make test exports it too; this covers a plain go
// test), removes the built binaries and exits with the tests' code.
func Main(m *testing.M) {
	quickExitChildren()
	code := m.Run()
	Cleanup()
	os.Exit(code)
}

// quickExitChildren adds atexit_sleep_ms=0 to GORACE unless it sets
// atexit_sleep_ms already.
func quickExitChildren() {
	v := os.Getenv("GORACE")
	if strings.Contains(v, "atexit_sleep_ms") {
		return
	}
	os.Setenv("GORACE", strings.TrimSpace(v+" atexit_sleep_ms=0"))
}

// Gated writes an executable wrapper named name into dir that runs bin
// (with the wrapper's arguments, environment and process id, by exec)
// only while the gate is open, waiting while it is closed: a test closes
// the gate to hold a restart of a plugin at its launch, and opens it to
// let the restart go on. It returns the wrapper's path and the gate's
// open and close functions; the gate starts open.
func Gated(dir, name, bin string) (path string, open, closeGate func() error, err error) {
	gate := filepath.Join(dir, name+".gate")
	path = filepath.Join(dir, name)
	script := fmt.Sprintf("#!/bin/sh\n# waits while %[1]s is missing, then runs %[2]s\nwhile [ ! -e '%[1]s' ]; do sleep 0.01; done\nexec '%[2]s' \"$@\"\n", gate, bin)
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		return "", nil, nil, err
	}
	open = func() error { return os.WriteFile(gate, nil, 0o644) }
	closeGate = func() error { return os.Remove(gate) }
	return path, open, closeGate, open()
}
