package plugins

import (
	"context"
	"crypto/rand"
	"debug/elf"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/kvconnect/kvconnect/internal/testbin"
)

func TestLaunchTCPPluginAndClose(t *testing.T) {
	isolate(t)
	bin := build(t, "./cmd/kvconnect-transport-tcp", "kvconnect-transport-tcp")
	t.Setenv(EnvPluginDir, "")
	// Found by name in plugin_dir, as the connector does it.
	p, err := Launch(t.Context(), LaunchConfig{Name: "tcp", PluginDir: filepath.Dir(bin), Logger: zaptest.NewLogger(t), Env: []string{quickExit}})
	if err != nil {
		t.Fatal(err)
	}
	pid := p.Pid()
	if pid == 0 || pid == os.Getpid() {
		t.Fatalf("Pid() = %d", pid)
	}
	if p.Path() != bin {
		t.Errorf("Path() = %q, want %q", p.Path(), bin)
	}
	info, err := p.Info(t.Context())
	if err != nil || info.Name != "tcp" || info.APIVersion != APIVersion {
		t.Fatalf("Info = %+v, %v", info, err)
	}
	socketDir := p.proc.socketDir
	if _, err := os.Stat(socketDir); err != nil {
		t.Fatalf("socket dir: %v", err)
	}
	if err := p.Close(t.Context()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	// The process has been reaped when Close returns: its pid is gone.
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("after Close, kill(%d, 0) = %v, want ESRCH", pid, err)
	}
	select {
	case <-p.Exited():
	default:
		t.Error("Exited() not closed after Close")
	}
	if _, err := os.Stat(socketDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket dir %s still there after Close: %v", socketDir, err)
	}
	if err := p.Close(t.Context()); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := p.Info(t.Context()); !errors.Is(err, ErrClosed) && !errors.Is(err, ErrTransportCrashed) {
		t.Errorf("Info after Close: %v, want ErrClosed", err)
	}
}

func TestLaunchPluginNotFoundNamesEveryPathSearched(t *testing.T) {
	isolate(t)
	pluginDir, envDir, path1, path2 := t.TempDir(), t.TempDir(), t.TempDir(), t.TempDir()
	t.Setenv(EnvPluginDir, envDir)
	t.Setenv("PATH", path1+string(os.PathListSeparator)+"relative/dir"+string(os.PathListSeparator)+path2)
	// Another plugin is installed: the diagnosis suggests it.
	if err := os.WriteFile(filepath.Join(path2, BinaryPrefix+"rdma"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	ie := launchFails(t, LaunchConfig{Name: "rdam", PluginDir: pluginDir}, StepFindPlugin, ErrUnavailable, ErrPluginNotFound)
	exe, _ := os.Executable()
	want := []string{
		filepath.Join(pluginDir, "kvconnect-transport-rdam") + " (plugin_dir)",
		filepath.Join(envDir, "kvconnect-transport-rdam") + " ($KVCONNECT_PLUGIN_DIR)",
		filepath.Join(filepath.Dir(exe), "kvconnect-transport-rdam") + " (beside the executable)",
		filepath.Join(path1, "kvconnect-transport-rdam") + " ($PATH)",
		filepath.Join(path2, "kvconnect-transport-rdam") + " ($PATH)",
	}
	last := -1
	for _, w := range want {
		i := strings.Index(ie.Cause, w)
		if i < 0 {
			t.Errorf("cause does not name %q", w)
			continue
		}
		if i < last {
			t.Errorf("%q named out of order", w)
		}
		last = i
	}
	if strings.Contains(ie.Cause, "relative/dir") {
		t.Error("a relative PATH entry was searched")
	}
	if ie.NativeName != "ENOENT" || ie.NativeCode != int64(syscall.ENOENT) {
		t.Errorf("native %s %d, want ENOENT", ie.NativeName, ie.NativeCode)
	}
	wantContains(t, "hints", strings.Join(ie.Hints, "\n"), `did you mean "rdma"?`, "plugin_dir")

	_, searched, err := FindPlugin("rdam", pluginDir)
	if !errors.Is(err, ErrPluginNotFound) || len(searched) != len(want) {
		t.Errorf("FindPlugin: searched %q, %v", searched, err)
	}

	// An explicit path that does not exist.
	ie = launchFails(t, LaunchConfig{Name: "x", Path: filepath.Join(pluginDir, "nope")}, StepFindPlugin, ErrUnavailable, ErrPluginNotFound)
	if ie.NativeName != "ENOENT" {
		t.Errorf("native %q, want ENOENT", ie.NativeName)
	}
}

func TestLaunchBadName(t *testing.T) {
	for _, name := range []string{"", "../tcp", "a/b", ".hidden"} {
		_, err := Launch(t.Context(), LaunchConfig{Name: name})
		var ie *InitError
		if !errors.As(err, &ie) || ie.Step != StepFindPlugin || !errors.Is(err, ErrInvalidArgument) || errors.Is(err, ErrUnavailable) {
			t.Errorf("name %q: %v, want an InitError at %q wrapping ErrInvalidArgument only", name, err, StepFindPlugin)
		}
	}
}

func TestLaunchNotExecutable(t *testing.T) {
	isolate(t)
	t.Setenv(EnvPluginDir, "")
	dir := t.TempDir()
	bin := filepath.Join(dir, BinaryPrefix+"noexec")
	copyFile(t, buildTestdata(t, "silent"), bin, 0o644)

	// Found by the search: the search itself notices.
	ie := launchFails(t, LaunchConfig{Name: "noexec", PluginDir: dir}, StepStartPlugin, ErrUnavailable, ErrPluginStart)
	checkEACCES(t, ie, bin)

	// Given by path: the kernel refuses it.
	ie = launchFails(t, LaunchConfig{Name: "noexec", Path: bin}, StepStartPlugin, ErrUnavailable, ErrPluginStart)
	checkEACCES(t, ie, bin)
}

func checkEACCES(t *testing.T, ie *InitError, bin string) {
	t.Helper()
	if ie.NativeName != "EACCES" || ie.NativeCode != int64(syscall.EACCES) {
		t.Errorf("native %s %d, want EACCES %d", ie.NativeName, ie.NativeCode, syscall.EACCES)
	}
	wantContains(t, "cause", ie.Cause, bin, "not executable", "-rw-r--r--")
	wantContains(t, "hints", strings.Join(ie.Hints, "\n"), "chmod +x "+bin)
}

func TestLaunchExecFormatError(t *testing.T) {
	isolate(t)
	dir := t.TempDir()
	random := make([]byte, 4096)
	rand.Read(random)
	random[0] = 0x01 // not ELF, not #!
	writeFile(t, filepath.Join(dir, "random"), random, 0o755)
	writeFile(t, filepath.Join(dir, "text"), []byte("echo this script has no #! line\n"), 0o755)
	// A real binary for another architecture: this host's binary with
	// another ELF machine.
	other, otherMachine := elf.EM_AARCH64, "EM_AARCH64"
	if runtime.GOARCH == "arm64" {
		other, otherMachine = elf.EM_X86_64, "EM_X86_64"
	}
	foreign := filepath.Join(dir, "foreign")
	copyFile(t, buildTestdata(t, "silent"), foreign, 0o755)
	setELFMachine(t, foreign, other)

	for _, tc := range []struct{ file, says string }{
		{"random", "neither an ELF executable nor a script"},
		{"text", "a text file without a #! line"},
		{"foreign", "executable for " + otherMachine + ", but this host is " + runtime.GOOS + "/" + runtime.GOARCH},
	} {
		t.Run(tc.file, func(t *testing.T) {
			path := filepath.Join(dir, tc.file)
			ie := launchFails(t, LaunchConfig{Name: "x", Path: path}, StepStartPlugin, ErrUnavailable, ErrPluginStart)
			if ie.NativeName != "ENOEXEC" || ie.NativeCode != int64(syscall.ENOEXEC) {
				t.Errorf("native %s %d, want ENOEXEC", ie.NativeName, ie.NativeCode)
			}
			wantContains(t, "cause", ie.Cause, path, tc.says)
		})
	}
}

func TestLaunchMissingInterpreter(t *testing.T) {
	isolate(t)
	script := filepath.Join(t.TempDir(), "script")
	writeFile(t, script, []byte("#!/nonexistent/kvconnect-interp\n"), 0o755)
	ie := launchFails(t, LaunchConfig{Name: "x", Path: script}, StepStartPlugin, ErrUnavailable, ErrPluginStart)
	if ie.NativeName != "ENOENT" {
		t.Errorf("native %q, want ENOENT", ie.NativeName)
	}
	wantContains(t, "cause", ie.Cause, script+" exists", "/nonexistent/kvconnect-interp")
}

func TestLaunchExitBeforeHandshake(t *testing.T) {
	isolate(t)
	ie := launchFails(t, LaunchConfig{Name: "x", Path: buildTestdata(t, "exitearly")}, StepStartPlugin, ErrUnavailable, ErrPluginStart)
	if ie.NativeName != "exit status" || ie.NativeCode != 3 {
		t.Errorf("native %s %d, want exit status 3", ie.NativeName, ie.NativeCode)
	}
	wantContains(t, "cause", ie.Cause, "exitearly exited with status 3 before the plugin handshake",
		"exitearly: opening /dev/infiniband/uverbs0\n", "exitearly: fatal: no such device; giving up")
}

// TestLaunchMissingSharedLibrary builds a C shared library and a cgo
// program linked against it, removes the library and launches the
// program: the dynamic loader's own words reach the diagnosis.
func TestLaunchMissingSharedLibrary(t *testing.T) {
	isolate(t)
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("gcc not found: cannot build the shared library for this test")
	}
	if out, err := exec.Command("go", "env", "CGO_ENABLED").Output(); err != nil || strings.TrimSpace(string(out)) != "1" {
		t.Skipf("cgo is disabled (go env CGO_ENABLED = %q, %v): cannot build the test program", out, err)
	}
	dir := t.TempDir()
	lib := filepath.Join(dir, "libkvtest.so.1")
	src := filepath.Join(testbin.ModuleRoot(), "plugins", "testdata", "libkvtest", "kvtest.c")
	run(t, "", nil, gcc, "-shared", "-fPIC", "-Wl,-soname,libkvtest.so.1", "-o", lib, src)
	if err := os.Symlink("libkvtest.so.1", filepath.Join(dir, "libkvtest.so")); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "needlib")
	run(t, testbin.ModuleRoot(), []string{"CGO_ENABLED=1", "CGO_LDFLAGS=-L" + dir + " -Wl,-rpath," + dir},
		"go", "build", "-o", bin, "./plugins/testdata/needlib")
	if out := run(t, "", nil, bin); strings.TrimSpace(out) != "42" {
		t.Fatalf("needlib with its library printed %q, want 42", out)
	}
	if err := os.Remove(lib); err != nil {
		t.Fatal(err)
	}
	ie := launchFails(t, LaunchConfig{Name: "x", Path: bin}, StepStartPlugin, ErrUnavailable, ErrPluginStart)
	if ie.NativeName != "exit status" || ie.NativeCode != 127 {
		t.Errorf("native %s %d, want exit status 127", ie.NativeName, ie.NativeCode)
	}
	wantContains(t, "cause", ie.Cause, "error while loading shared libraries: libkvtest.so.1: cannot open shared object file")
	wantContains(t, "hints", strings.Join(ie.Hints, "\n"), "ldd "+bin)
}

func TestLaunchPluginOfAnotherSDK(t *testing.T) {
	isolate(t)
	ie := launchFails(t, LaunchConfig{Name: "x", Path: buildTestdata(t, "othersdk")}, StepHandshake, ErrUnavailable, ErrHandshake)
	if ie.NativeName != "exit status" || ie.NativeCode != ExitCookieMismatch {
		t.Errorf("native %s %d, want exit status %d", ie.NativeName, ie.NativeCode, ExitCookieMismatch)
	}
	wantContains(t, "cause", ie.Cause, "handshake cookie differs",
		// The plugin's own one-line explanation:
		`it sent handshake cookie KVCONNECT_TRANSPORT_PLUGIN="7f1c0a52-kvconnect-transport-v1", this plugin expects "7f1c0a52-kvconnect-transport-v0"`)
}

func TestLaunchWrongProtocolVersion(t *testing.T) {
	isolate(t)
	ie := launchFails(t, LaunchConfig{Name: "x", Path: buildTestdata(t, "badversion")}, StepHandshake, ErrUnavailable, ErrHandshake)
	wantContains(t, "cause", ie.Cause, "speaks kvconnect plugin protocol version 99; this host speaks 1")
	wantContains(t, "hints", strings.Join(ie.Hints, "\n"), "newer than this host")
	if ie.NativeCode != 0 {
		t.Errorf("native %s %d: the host killed the plugin, nothing native to report", ie.NativeName, ie.NativeCode)
	}
}

func TestLaunchNotAPlugin(t *testing.T) {
	isolate(t)
	ie := launchFails(t, LaunchConfig{Name: "x", Path: buildTestdata(t, "notaplugin")}, StepHandshake, ErrUnavailable, ErrHandshake)
	wantContains(t, "cause", ie.Cause, "is not a kvconnect transport plugin", `printed "usage: notaplugin [-v] FILE..." on stdout`)
}

func TestLaunchHandshakeTimeout(t *testing.T) {
	isolate(t)
	const timeout = 300 * time.Millisecond
	start := time.Now()
	ie := launchFails(t, LaunchConfig{Name: "x", Path: buildTestdata(t, "silent"), StartTimeout: timeout}, StepHandshake, ErrUnavailable, ErrHandshake)
	if took := time.Since(start); took < timeout || took > timeout+5*time.Second {
		t.Errorf("took %v with StartTimeout %v", took, timeout)
	}
	wantContains(t, "cause", ie.Cause, "did not complete the plugin handshake within 300ms")
}

func TestLaunchCanceled(t *testing.T) {
	isolate(t)
	bin := buildTestdata(t, "silent")
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := Launch(ctx, LaunchConfig{Name: "x", Path: bin, StartTimeout: time.Minute, Env: []string{quickExit}})
	var ie *InitError
	if !errors.As(err, &ie) || ie.Step != StepStartPlugin || !errors.Is(err, ErrTimeout) || !errors.Is(err, ErrPluginStart) || errors.Is(err, ErrUnavailable) {
		t.Fatalf("got %v, want an InitError wrapping ErrTimeout and ErrPluginStart, not ErrUnavailable", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("a canceled start took %v", took)
	}

	ctx, cancel = context.WithCancel(t.Context())
	cancel()
	if _, err := Launch(ctx, LaunchConfig{Name: "x", Path: bin}); !errors.Is(err, ErrCanceled) {
		t.Errorf("with a canceled ctx: %v, want ErrCanceled", err)
	}
}

func TestInitCrashIsDiagnosed(t *testing.T) {
	isolate(t)
	p, err := Launch(t.Context(), LaunchConfig{Name: "fake", Path: buildTestdata(t, "fakeplugin"), Logger: zaptest.NewLogger(t),
		Env: []string{quickExit, "FAKEPLUGIN_INIT=panic"}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	_, err = p.Init(t.Context(), InitRequest{})
	var ie *InitError
	if !errors.As(err, &ie) {
		t.Fatalf("Init: %T %v, want *InitError", err, err)
	}
	t.Logf("%s", diagnosis(ie))
	if ie.Transport != "fake" || ie.Step != StepInitPluginCrash || !errors.Is(err, ErrTransportCrashed) || !errors.Is(err, ErrUnavailable) {
		t.Errorf("got %#v, want step %q wrapping ErrTransportCrashed and ErrUnavailable", ie, StepInitPluginCrash)
	}
	if ie.NativeName != "exit status" || ie.NativeCode != 2 { // a Go panic exits 2
		t.Errorf("native %s %d, want exit status 2", ie.NativeName, ie.NativeCode)
	}
	wantContains(t, "cause", ie.Cause, "exited with status 2 during init", "panic: fake transport: init failed on purpose")
	wantContains(t, "StderrTail", p.StderrTail(), "panic: fake transport: init failed on purpose", "goroutine ")
	select {
	case <-p.Exited():
	case <-time.After(5 * time.Second):
		t.Error("Exited() not closed after the crash")
	}
	if err := p.Close(t.Context()); err != nil {
		t.Errorf("Close after a crash: %v", err)
	}
}

func TestRegionMemoryReachesPlugin(t *testing.T) {
	isolate(t)
	p := launchFake(t)
	seg := newSegment(t, 1<<20)
	copy(seg.Bytes(), "kvconnect region")
	key, err := p.RegisterRegion(t.Context(), Region{ID: 1, Addr: 4096, Mem: seg.Bytes(), File: seg.File()})
	if err != nil {
		t.Fatal(err)
	}
	// The plugin answers with the first bytes of the memory it mapped from
	// the descriptor it received.
	if string(key) != "kvconnect region" {
		t.Errorf("plugin read %q from the region, want %q", key, "kvconnect region")
	}
	if err := p.DeregisterRegion(t.Context(), 1); err != nil {
		t.Error(err)
	}
}

func launchFake(t *testing.T, env ...string) *Plugin {
	t.Helper()
	p, err := Launch(t.Context(), LaunchConfig{Name: "fake", Path: buildTestdata(t, "fakeplugin"), Logger: zaptest.NewLogger(t),
		Env: append([]string{quickExit}, env...)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return p
}

func TestParseHandshakeLine(t *testing.T) {
	for _, tc := range []struct {
		line string
		want handshakeLine
		ok   bool
	}{
		{"1|1|unix|/tmp/plugin123|grpc|", handshakeLine{1, 1, "grpc"}, true},
		{"1|99|tcp|127.0.0.1:1234", handshakeLine{1, 99, "netrpc"}, true},
		{"usage: foo", handshakeLine{}, false},
		{"a|1|unix|/x|grpc", handshakeLine{}, false},
		{"1|b|unix|/x|grpc", handshakeLine{}, false},
	} {
		got, err := parseHandshakeLine(tc.line)
		if (err == nil) != tc.ok || (tc.ok && got != tc.want) {
			t.Errorf("parseHandshakeLine(%q) = %+v, %v", tc.line, got, err)
		}
		if err != nil && !errors.Is(err, ErrProtocol) {
			t.Errorf("parseHandshakeLine(%q): %v does not wrap ErrProtocol", tc.line, err)
		}
	}
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, to, b, mode)
}

func writeFile(t *testing.T, path string, b []byte, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, b, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil { // WriteFile's mode is masked by the umask
		t.Fatal(err)
	}
}

// setELFMachine rewrites e_machine in an ELF file's header.
func setELFMachine(t *testing.T, path string, m elf.Machine) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var b [2]byte
	binary.LittleEndian.PutUint16(b[:], uint16(m))
	if _, err := f.WriteAt(b[:], 18); err != nil { // e_machine
		t.Fatal(err)
	}
}

func run(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestLaunchKilledBeforeHandshake: a plugin killed by someone else (here
// itself; in life the OOM killer) is told apart from one the host killed.
func TestLaunchKilledBeforeHandshake(t *testing.T) {
	isolate(t)
	ie := launchFails(t, LaunchConfig{Name: "x", Path: buildTestdata(t, "selfkill")}, StepStartPlugin, ErrUnavailable, ErrPluginStart)
	if ie.NativeName != "SIGKILL" || ie.NativeCode != int64(syscall.SIGKILL) {
		t.Errorf("native %s %d, want SIGKILL %d", ie.NativeName, ie.NativeCode, syscall.SIGKILL)
	}
	wantContains(t, "cause", ie.Cause, "was killed by SIGKILL", "before the plugin handshake", "selfkill: allocating device queues")
	wantContains(t, "hints", strings.Join(ie.Hints, "\n"), "OOM killer")
}

func TestLaunchNoTempDir(t *testing.T) {
	isolate(t)
	missing := filepath.Join(t.TempDir(), "missing")
	t.Setenv("TMPDIR", missing)
	ie := launchFails(t, LaunchConfig{Name: "x", Path: buildTestdata(t, "silent")}, StepStartPlugin, ErrUnavailable, ErrPluginStart)
	wantContains(t, "cause", ie.Cause, "cannot prepare to start")
	if ie.NativeName != "ENOENT" {
		t.Errorf("native %q, want ENOENT", ie.NativeName)
	}
	wantContains(t, "hints", strings.Join(ie.Hints, "\n"), "temporary directory "+missing)
}
