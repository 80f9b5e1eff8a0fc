package host

import (
	"context"
	"crypto/rand"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kvconnect/kvconnect/errdefs"
	"github.com/kvconnect/kvconnect/internal/pluginrpc"
	"github.com/kvconnect/kvconnect/internal/testbin"
	"github.com/kvconnect/kvconnect/plugins"
)

func TestLaunchTCPPluginAndClose(t *testing.T) {
	isolate(t)
	bin := build(t, "./cmd/kvconnect-transport-tcp", "kvconnect-transport-tcp")
	t.Setenv(EnvPluginDir, "")
	fds := openFDs(t)
	// Found by name in plugin_dir, as the connector does it.
	p, err := Launch(t.Context(), LaunchConfig{Name: "tcp", PluginDir: filepath.Dir(bin), Logger: zaptest.NewLogger(t)})
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
	if err != nil || info.Name != "tcp" || info.APIVersion != pluginrpc.ProtocolVersion {
		t.Fatalf("plugins.Info = %+v, %v", info, err)
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
	if n := openFDs(t); n != fds {
		t.Errorf("%d descriptors open after Close, %d before Launch", n, fds)
	}
	if err := p.Close(t.Context()); err != nil {
		t.Errorf("second Close: %v", err)
	}
	// Info after Close answers what the plugin last said.
	if info, err := p.Info(t.Context()); err != nil || info.Name != "tcp" {
		t.Errorf("Info after Close: %+v, %v; want tcp's last Info", info, err)
	}
	if _, err := p.Connect(t.Context(), plugins.PeerInfo{Name: "x", Endpoint: []byte("127.0.0.1:1")}); !errors.Is(err, errdefs.ErrClosed) {
		t.Errorf("Connect after Close: %v, want ErrClosed", err)
	}
}

// TestLaunchFromARelativePluginDir: plugin_dir "." (or any relative
// directory) runs the file found there, not a same-named binary on PATH
// (exec looks a path without a slash up on PATH).
func TestLaunchFromARelativePluginDir(t *testing.T) {
	isolate(t)
	bin := build(t, "./cmd/kvconnect-transport-tcp", "kvconnect-transport-tcp")
	dir := t.TempDir()
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "kvconnect-transport-tcp"), b, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	t.Setenv("PATH", t.TempDir()) // holds no plugin
	t.Setenv(EnvPluginDir, "")
	p, err := Launch(t.Context(), LaunchConfig{Name: "tcp", PluginDir: ".", Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatalf("Launch from plugin_dir \".\": %v", err)
	}
	defer p.Close(context.Background())
	if want := filepath.Join(dir, "kvconnect-transport-tcp"); p.Path() != want {
		t.Errorf("Path() = %q, want %q", p.Path(), want)
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
	ie := launchFails(t, LaunchConfig{Name: "rdam", PluginDir: pluginDir}, errdefs.StepFindPlugin, errdefs.ErrUnavailable, errdefs.ErrPluginNotFound)
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
	if !errors.Is(err, errdefs.ErrPluginNotFound) || len(searched) != len(want) {
		t.Errorf("FindPlugin: searched %q, %v", searched, err)
	}

	// An explicit path that does not exist.
	ie = launchFails(t, LaunchConfig{Name: "x", Path: filepath.Join(pluginDir, "nope")}, errdefs.StepFindPlugin, errdefs.ErrUnavailable, errdefs.ErrPluginNotFound)
	if ie.NativeName != "ENOENT" {
		t.Errorf("native %q, want ENOENT", ie.NativeName)
	}
}

func TestLaunchBadName(t *testing.T) {
	for _, name := range []string{"", "../tcp", "a/b", ".hidden"} {
		_, err := Launch(t.Context(), LaunchConfig{Name: name})
		var ie *errdefs.InitError
		if !errors.As(err, &ie) || ie.Step != errdefs.StepFindPlugin || !errors.Is(err, errdefs.ErrInvalidArgument) || errors.Is(err, errdefs.ErrUnavailable) {
			t.Errorf("name %q: %v, want an errdefs.InitError at %q wrapping errdefs.ErrInvalidArgument only", name, err, errdefs.StepFindPlugin)
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
	ie := launchFails(t, LaunchConfig{Name: "noexec", PluginDir: dir}, errdefs.StepStartPlugin, errdefs.ErrUnavailable, errdefs.ErrPluginStart)
	checkEACCES(t, ie, bin)

	// Given by path: the kernel refuses it.
	ie = launchFails(t, LaunchConfig{Name: "noexec", Path: bin}, errdefs.StepStartPlugin, errdefs.ErrUnavailable, errdefs.ErrPluginStart)
	checkEACCES(t, ie, bin)
}

func checkEACCES(t *testing.T, ie *errdefs.InitError, bin string) {
	t.Helper()
	if ie.NativeName != "EACCES" || ie.NativeCode != int64(syscall.EACCES) {
		t.Errorf("native %s %d, want EACCES %d", ie.NativeName, ie.NativeCode, syscall.EACCES)
	}
	wantContains(t, "cause", ie.Cause, bin, "not executable", "-rw-r--r--")
	wantContains(t, "hints", strings.Join(ie.Hints, "\n"), "chmod +x "+bin)
}

// A LaunchConfig.Path that is a directory says so (exec answers EACCES,
// which would otherwise read as a noexec mount).
func TestLaunchPathIsADirectory(t *testing.T) {
	isolate(t)
	dir := t.TempDir()
	_, err := Launch(t.Context(), LaunchConfig{Name: "x", Path: dir})
	var ie *errdefs.InitError
	if !errors.As(err, &ie) || ie.Step != errdefs.StepStartPlugin || !errors.Is(err, errdefs.ErrPluginStart) {
		t.Fatalf("got %v, want an InitError at start plugin", err)
	}
	wantContains(t, "cause", ie.Cause, "is a directory")
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
			ie := launchFails(t, LaunchConfig{Name: "x", Path: path}, errdefs.StepStartPlugin, errdefs.ErrUnavailable, errdefs.ErrPluginStart)
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
	ie := launchFails(t, LaunchConfig{Name: "x", Path: script}, errdefs.StepStartPlugin, errdefs.ErrUnavailable, errdefs.ErrPluginStart)
	if ie.NativeName != "ENOENT" {
		t.Errorf("native %q, want ENOENT", ie.NativeName)
	}
	wantContains(t, "cause", ie.Cause, script+" exists", "/nonexistent/kvconnect-interp")
}

func TestLaunchExitBeforeHandshake(t *testing.T) {
	isolate(t)
	ie := launchFails(t, LaunchConfig{Name: "x", Path: buildTestdata(t, "exitearly")}, errdefs.StepStartPlugin, errdefs.ErrUnavailable, errdefs.ErrPluginStart)
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
	src := filepath.Join(testbin.ModuleRoot(), "plugins", "host", "testdata", "libkvtest", "kvtest.c")
	run(t, "", nil, gcc, "-shared", "-fPIC", "-Wl,-soname,libkvtest.so.1", "-o", lib, src)
	if err := os.Symlink("libkvtest.so.1", filepath.Join(dir, "libkvtest.so")); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "needlib")
	run(t, testbin.ModuleRoot(), []string{"CGO_ENABLED=1", "CGO_LDFLAGS=-L" + dir + " -Wl,-rpath," + dir},
		"go", "build", "-o", bin, "./plugins/host/testdata/needlib")
	if out := run(t, "", nil, bin); strings.TrimSpace(out) != "42" {
		t.Fatalf("needlib with its library printed %q, want 42", out)
	}
	if err := os.Remove(lib); err != nil {
		t.Fatal(err)
	}
	ie := launchFails(t, LaunchConfig{Name: "x", Path: bin}, errdefs.StepStartPlugin, errdefs.ErrUnavailable, errdefs.ErrPluginStart)
	if ie.NativeName != "exit status" || ie.NativeCode != 127 {
		t.Errorf("native %s %d, want exit status 127", ie.NativeName, ie.NativeCode)
	}
	wantContains(t, "cause", ie.Cause, "error while loading shared libraries: libkvtest.so.1: cannot open shared object file")
	wantContains(t, "hints", strings.Join(ie.Hints, "\n"), "ldd "+bin)
}

func TestLaunchPluginOfAnotherSDK(t *testing.T) {
	isolate(t)
	ie := launchFails(t, LaunchConfig{Name: "x", Path: buildTestdata(t, "othersdk")}, errdefs.StepHandshake, errdefs.ErrUnavailable, errdefs.ErrHandshake)
	if ie.NativeName != "exit status" || ie.NativeCode != pluginrpc.ExitCookieMismatch {
		t.Errorf("native %s %d, want exit status %d", ie.NativeName, ie.NativeCode, pluginrpc.ExitCookieMismatch)
	}
	wantContains(t, "cause", ie.Cause, "handshake cookie differs",
		// The plugin's own one-line explanation:
		`it sent handshake cookie KVCONNECT_TRANSPORT_PLUGIN="7f1c0a52-kvconnect-transport-v1", this plugin expects "7f1c0a52-kvconnect-transport-v0"`)
}

func TestLaunchWrongProtocolVersion(t *testing.T) {
	isolate(t)
	ie := launchFails(t, LaunchConfig{Name: "x", Path: buildTestdata(t, "badversion")}, errdefs.StepHandshake, errdefs.ErrUnavailable, errdefs.ErrHandshake)
	wantContains(t, "cause", ie.Cause, "speaks kvconnect plugin protocol version 99; this host speaks 1")
	wantContains(t, "hints", strings.Join(ie.Hints, "\n"), "newer than this host")
	if ie.NativeCode != 0 {
		t.Errorf("native %s %d: the host killed the plugin, nothing native to report", ie.NativeName, ie.NativeCode)
	}
}

func TestLaunchNotAPlugin(t *testing.T) {
	isolate(t)
	ie := launchFails(t, LaunchConfig{Name: "x", Path: buildTestdata(t, "notaplugin")}, errdefs.StepHandshake, errdefs.ErrUnavailable, errdefs.ErrHandshake)
	wantContains(t, "cause", ie.Cause, "is not a kvconnect transport plugin", `printed "usage: notaplugin [-v] FILE..." on stdout`)
}

func TestLaunchHandshakeTimeout(t *testing.T) {
	isolate(t)
	const timeout = 300 * time.Millisecond
	start := time.Now()
	ie := launchFails(t, LaunchConfig{Name: "x", Path: buildTestdata(t, "silent"), StartTimeout: timeout}, errdefs.StepHandshake, errdefs.ErrUnavailable, errdefs.ErrHandshake)
	// Not before StartTimeout; after it as soon as a loaded machine gets
	// to it (the silent plugin would otherwise hold Launch for a minute).
	if took := time.Since(start); took < timeout || took > timeout+30*time.Second {
		t.Errorf("took %v with StartTimeout %v", took, timeout)
	}
	wantContains(t, "cause", ie.Cause, "did not complete the plugin handshake within 300ms")
}

// TestLaunchOfAPluginThatDoesNotAnswerInfo: a plugin that completes the
// handshake and then answers nothing holds Launch no longer than the
// caller's ctx (ErrTimeout, not "another SDK") or, with a ctx without
// deadline, the start timeout.
func TestLaunchOfAPluginThatDoesNotAnswerInfo(t *testing.T) {
	isolate(t)
	bin := buildTestdata(t, "fakeplugin")
	env := []string{"FAKEPLUGIN_INFO=hang"}
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	_, err := Launch(ctx, LaunchConfig{Name: "fake", Path: bin, Env: env, StartTimeout: time.Minute})
	var ie *errdefs.InitError
	if !errors.As(err, &ie) || !errors.Is(err, errdefs.ErrTimeout) || errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("the caller's deadline passed during Info: %v, want an InitError wrapping ErrTimeout, not ErrUnavailable", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := Launch(context.Background(), LaunchConfig{Name: "fake", Path: bin, Env: env, StartTimeout: 500 * time.Millisecond})
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.As(err, &ie) || ie.Step != errdefs.StepHandshake || !errors.Is(err, errdefs.ErrUnavailable) || !errors.Is(err, errdefs.ErrTimeout) {
			t.Errorf("no deadline, Info unanswered: %v, want an InitError at handshake wrapping ErrUnavailable and ErrTimeout", err)
		}
		wantContains(t, "cause", ie.Cause, "did not answer Info within the plugin start timeout")
	case <-time.After(2 * time.Minute):
		t.Fatal("Launch with a ctx without deadline still waiting for Info after 2 minutes")
	}
	assertNoChildren(t)
}

func TestLaunchCanceled(t *testing.T) {
	isolate(t)
	bin := buildTestdata(t, "silent")
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := Launch(ctx, LaunchConfig{Name: "x", Path: bin, StartTimeout: time.Minute})
	var ie *errdefs.InitError
	if !errors.As(err, &ie) || ie.Step != errdefs.StepStartPlugin || !errors.Is(err, errdefs.ErrTimeout) || !errors.Is(err, errdefs.ErrPluginStart) || errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("got %v, want an errdefs.InitError wrapping errdefs.ErrTimeout and errdefs.ErrPluginStart, not errdefs.ErrUnavailable", err)
	}
	// Canceled at 200ms: well before StartTimeout (a minute), which a
	// start that ignored the context would wait for.
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("a canceled start took %v", took)
	}

	ctx, cancel = context.WithCancel(t.Context())
	cancel()
	if _, err := Launch(ctx, LaunchConfig{Name: "x", Path: bin}); !errors.Is(err, errdefs.ErrCanceled) {
		t.Errorf("with a canceled ctx: %v, want errdefs.ErrCanceled", err)
	}
}

func TestInitCrashIsDiagnosed(t *testing.T) {
	isolate(t)
	p, err := Launch(t.Context(), LaunchConfig{Name: "fake", Path: buildTestdata(t, "fakeplugin"), Logger: zaptest.NewLogger(t),
		Env: []string{"FAKEPLUGIN_INIT=panic"}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	_, err = p.Init(t.Context(), plugins.InitRequest{})
	var ie *errdefs.InitError
	if !errors.As(err, &ie) {
		t.Fatalf("Init: %T %v, want *errdefs.InitError", err, err)
	}
	t.Logf("%s", diagnosis(ie))
	if ie.Transport != "fake" || ie.Step != errdefs.StepInitPluginCrash || !errors.Is(err, errdefs.ErrTransportCrashed) || !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("got %#v, want step %q wrapping errdefs.ErrTransportCrashed and errdefs.ErrUnavailable", ie, errdefs.StepInitPluginCrash)
	}
	if ie.NativeName != "exit status" || ie.NativeCode != 2 { // a Go panic exits 2
		t.Errorf("native %s %d, want exit status 2", ie.NativeName, ie.NativeCode)
	}
	wantContains(t, "cause", ie.Cause, "exited with status 2 during init", "panic: fake transport: init failed on purpose")
	wantContains(t, "StderrTail", p.StderrTail(), "panic: fake transport: init failed on purpose", "goroutine ")
	select {
	case <-p.Exited():
	case <-time.After(testbin.WaitLimit):
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
	key, err := p.RegisterRegion(t.Context(), plugins.Region{ID: 1, Addr: 4096, Mem: seg.Bytes(), File: seg.File()})
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

// TestRegistrationTheHostGaveUpOnDoesNotStay: a registration that ends
// after the host's deadline (the transport took its time, ignoring it)
// is undone in the plugin: the host took the call for failed and may free
// the memory, and registering the id again must work.
func TestRegistrationTheHostGaveUpOnDoesNotStay(t *testing.T) {
	isolate(t)
	p := launchFake(t, "FAKEPLUGIN_REGISTER=slow")
	seg := newSegment(t, 1<<20)
	r := plugins.Region{ID: 5, Addr: 4096, Mem: seg.Bytes(), File: seg.File()}
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if _, err := p.RegisterRegion(ctx, r); !errors.Is(err, errdefs.ErrTimeout) {
		t.Fatalf("a registration past its deadline: %v, want ErrTimeout", err)
	}
	// The plugin undoes it once the transport returns; the host does not
	// know when. Registering again may meet the undo under way: retry
	// until it has run (bounded).
	deadline := time.Now().Add(testbin.WaitLimit)
	for {
		_, err := p.RegisterRegion(t.Context(), r)
		if err == nil {
			break
		}
		if !errors.Is(err, errdefs.ErrInvalidArgument) || time.Now().After(deadline) {
			t.Fatalf("registering the id again after the call the host gave up on: %v", err)
		}
	}
}

// openFDs counts this process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

func launchFake(t *testing.T, env ...string) *Plugin {
	t.Helper()
	p, err := Launch(t.Context(), LaunchConfig{Name: "fake", Path: buildTestdata(t, "fakeplugin"), Logger: zaptest.NewLogger(t),
		Env: env})
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
		if err != nil && !errors.Is(err, errdefs.ErrProtocol) {
			t.Errorf("parseHandshakeLine(%q): %v does not wrap errdefs.ErrProtocol", tc.line, err)
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
	ie := launchFails(t, LaunchConfig{Name: "x", Path: buildTestdata(t, "selfkill")}, errdefs.StepStartPlugin, errdefs.ErrUnavailable, errdefs.ErrPluginStart)
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
	ie := launchFails(t, LaunchConfig{Name: "x", Path: buildTestdata(t, "silent")}, errdefs.StepStartPlugin, errdefs.ErrUnavailable, errdefs.ErrPluginStart)
	wantContains(t, "cause", ie.Cause, "cannot prepare to start")
	if ie.NativeName != "ENOENT" {
		t.Errorf("native %q, want ENOENT", ie.NativeName)
	}
	wantContains(t, "hints", strings.Join(ie.Hints, "\n"), "temporary directory "+missing)
}

func TestStatusWithoutDetail(t *testing.T) {
	crashed := &grpcClient{name: "x", crashed: func() (string, error) { return "the plugin process exited", errdefs.ErrTransportCrashed }}
	running := &grpcClient{name: "x", crashed: func() (string, error) { return "", nil }}
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		c    *grpcClient
		ctx  context.Context
		code codes.Code
		want error
	}{
		{running, context.Background(), codes.DeadlineExceeded, errdefs.ErrTimeout},
		{running, context.Background(), codes.ResourceExhausted, errdefs.ErrInvalidArgument},
		{running, context.Background(), codes.Unavailable, errdefs.ErrTransportCrashed},
		{running, context.Background(), codes.Canceled, errdefs.ErrCanceled},
		{crashed, context.Background(), codes.Unavailable, errdefs.ErrTransportCrashed},
		{running, canceled, codes.Unavailable, errdefs.ErrCanceled},
		{running, context.Background(), codes.Internal, errdefs.ErrInternal},
	} {
		err := tc.c.fromStatus(tc.ctx, "op", status.Error(tc.code, "from grpc"))
		if !errors.Is(err, tc.want) {
			t.Errorf("%v: %v, want %v", tc.code, err, tc.want)
		}
	}
}

// TestErrorsFromARealPlugin: errors a transport returns in a plugin
// process reach the host with errors.Is and *errdefs.InitError intact.
func TestErrorsFromARealPlugin(t *testing.T) {
	isolate(t)
	p := launchFake(t, "FAKEPLUGIN_INIT=fail")
	for _, name := range errdefs.KindNames() {
		sentinel := errdefs.FromKind(name)
		_, err := p.Connect(t.Context(), plugins.PeerInfo{Name: name})
		if !errors.Is(err, sentinel) {
			t.Errorf("%s: %v does not match its sentinel", name, err)
		}
		if want := fmt.Sprintf("fake: connect %s: %v", name, sentinel); err == nil || err.Error() != want {
			t.Errorf("%s: message %v, want %q", name, err, want)
		}
	}
	_, err := p.Init(t.Context(), plugins.InitRequest{})
	var ie *errdefs.InitError
	if !errors.As(err, &ie) {
		t.Fatalf("Init: %T %v, want *errdefs.InitError", err, err)
	}
	want := errdefs.InitError{Transport: "fake", Step: errdefs.StepProbeDevices, NativeCode: 19, NativeName: "ENODEV",
		Cause: "no RDMA device is present", Hints: []string{"install an RDMA NIC", "or use tcp"}, Err: errdefs.ErrUnavailable}
	if !reflect.DeepEqual(*ie, want) || !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("got %#v\nwant %#v", *ie, want)
	}
}

// TestPluginLogsReachHostLogger: a line a plugin logs with zap fields
// reaches the host's zap logger, under the plugin's name, with its fields.
func TestPluginLogsReachHostLogger(t *testing.T) {
	isolate(t)
	core, logs := observer.New(zapcore.InfoLevel)
	p, err := Launch(t.Context(), LaunchConfig{Name: "fake", Path: buildTestdata(t, "fakeplugin"), Logger: zap.New(core)})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(t.Context())
	if _, err := p.Init(t.Context(), plugins.InitRequest{}); err != nil {
		t.Fatal(err)
	}
	// The line travels through the plugin's stderr: wait for it.
	testbin.Eventually(t, "the plugin's log line to reach the host logger", func() bool {
		return logs.FilterMessage("probing devices").Len() > 0
	})
	entry := logs.FilterMessage("probing devices").AllUntimed()[0]
	if entry.Level != zapcore.InfoLevel || !strings.HasPrefix(entry.LoggerName, "plugin.fake") {
		t.Errorf("level %v logger %q, want info under plugin.fake", entry.Level, entry.LoggerName)
	}
	m := entry.ContextMap()
	if m["device"] != "mlx5_0" || m["port"] != float64(1) { // JSON numbers arrive as float64
		t.Errorf("fields %v, want device=mlx5_0 port=1", m)
	}
	if _, ok := m["timestamp"]; ok {
		t.Errorf("the plugin's timestamp was kept as a field: %v", m)
	}
}

// TestCloseDetachesGoPluginLogger: go-plugin's stdio reader outlives
// Client.Kill and logs when its stream ends; once Close returns, nothing
// it logs may reach the host's logger (which its owner may have closed).
func TestCloseDetachesGoPluginLogger(t *testing.T) {
	isolate(t)
	core, logs := observer.New(zapcore.DebugLevel)
	p, err := Launch(t.Context(), LaunchConfig{Name: "fake", Path: buildTestdata(t, "fakeplugin"), Logger: zap.New(core)})
	if err != nil {
		t.Fatal(err)
	}
	stdio := p.goLog.Named("stdio") // as go-plugin derives its stdio reader's logger
	stdio.Debug("before close")
	if err := p.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	stdio.Debug("after close")
	if logs.FilterMessage("before close").Len() != 1 {
		t.Fatalf("the go-plugin logger did not reach the host's before Close: %+v", logs.AllUntimed())
	}
	if n := logs.FilterMessage("after close").Len(); n != 0 {
		t.Errorf("%d lines logged through go-plugin's logger after Close reached the host's logger", n)
	}
}

func TestTailBufferKeepsTheEnd(t *testing.T) {
	tb := &tailBuffer{max: 16}
	tb.Write([]byte("0123456789"))
	tb.Write([]byte("abcdefghij\n"))
	if got := tb.String(); got != "56789abcdefghij" {
		t.Errorf("tail %q, want the last 16 bytes trimmed", got)
	}
}

// TestLaunchFromALockedThreadThatEnds: the plugin's parent-death signal
// follows the thread that forked it. A caller whose goroutine is locked
// to its thread and ends without unlocking takes the thread with it; the
// plugin must outlive that thread (it dies with the process only).
func TestLaunchFromALockedThreadThatEnds(t *testing.T) {
	isolate(t)
	bin := buildTestdata(t, "fakeplugin")
	type launched struct {
		p   *Plugin
		tid int
		err error
	}
	ch := make(chan launched, 1)
	var l launched
	for l.p == nil && l.err == nil {
		go func() {
			runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
			if syscall.Gettid() == os.Getpid() {
				// The main thread never exits (Go parks it): try another.
				runtime.UnlockOSThread()
				ch <- launched{}
				return
			}
			p, err := Launch(context.Background(), LaunchConfig{Name: "fake", Path: bin, Logger: zaptest.NewLogger(t)})
			ch <- launched{p, syscall.Gettid(), err}
		}()
		l = <-ch
	}
	if l.err != nil {
		t.Fatal(l.err)
	}
	defer l.p.Close(context.Background())
	// Wait for the locked thread to be gone (the kernel sends the
	// parent-death signal as it exits).
	task := fmt.Sprintf("/proc/self/task/%d", l.tid)
	deadline := time.Now().Add(testbin.WaitLimit)
	for {
		if _, err := os.Stat(task); errors.Is(err, os.ErrNotExist) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("thread %d still there", l.tid)
		}
		time.Sleep(10 * time.Millisecond) // polling /proc
	}
	if _, err := l.p.Init(t.Context(), plugins.InitRequest{}); err != nil {
		t.Fatalf("the plugin after the thread that launched it ended: %v", err)
	}
	if err := syscall.Kill(l.p.Pid(), 0); err != nil {
		t.Fatalf("plugin process: %v", err)
	}
}
