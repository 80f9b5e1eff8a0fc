package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/kvconnect/kvconnect/internal/testbin"
)

func TestMain(m *testing.M) { testbin.Main(m) }

// EnvTestLibrary names a libkvconnect.so built from this tree (make test
// sets it to bin/'s): TestCProgram then uses it instead of building one.
const EnvTestLibrary = "KVCONNECT_TEST_LIBKVCONNECT"

// TestCProgram builds libkvconnect.so (or takes $KVCONNECT_TEST_LIBKVCONNECT), compiles testdata/api_test.c
// against include/kvconnect.h with the system's C compiler, and runs it:
// the C API as a C program uses it (see the program's comment).
func TestCProgram(t *testing.T) {
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("gcc not found: the C API test needs a C compiler (apt-get install gcc)")
	}
	dir := t.TempDir()
	root := testbin.ModuleRoot()
	lib := filepath.Join(dir, "libkvconnect.so")
	if built := os.Getenv(EnvTestLibrary); built != "" {
		// make test built it a moment ago (make lib): link against that.
		if err := os.Symlink(built, lib); err != nil {
			t.Fatal(err)
		}
	} else {
		build := exec.Command("go", "build", "-buildmode=c-shared", "-o", lib, "./bindings/c")
		build.Dir = root
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("go build -buildmode=c-shared: %v\n%s", err, out)
		}
	}
	plugins := testbin.PluginDir(t, "rdma", "tcp")
	prog := filepath.Join(dir, "api_test")
	cc := exec.Command(gcc, "-Wall", "-Wextra", "-Werror", "-O1", "-g", "-o", prog, "bindings/c/testdata/api_test.c",
		"-Ibindings/c/include", "-L"+dir, "-lkvconnect", "-Wl,-rpath,"+dir, "-lpthread")
	cc.Dir = root
	if out, err := cc.CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	run := exec.CommandContext(ctx, prog, plugins)
	run.Env = append(os.Environ(), testbin.QuickExit)
	out, err := run.CombinedOutput()
	if err != nil {
		t.Fatalf("api_test: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}
