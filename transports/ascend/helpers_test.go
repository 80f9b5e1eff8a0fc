package ascend

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// fixtureDev is the absolute dev root of a scenario under testdata/.
func fixtureDev(t testing.TB, scenario string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("testdata", scenario, "dev"))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// env is a Getenv over a fixed map: the tests never read the real
// ASCEND_NPU_PHY_ID, ASCEND_HOME_PATH or LD_LIBRARY_PATH.
func env(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

// C sources of the stand-in libraries. They are not CANN: they only let
// the real dlopen path succeed or fail the way an install does.
const (
	srcACL      = "int aclInit(const char *configPath) { (void)configPath; return 0; }\n"
	srcNoSymbol = "int aclSomethingElse(void) { return 0; }\n"
	srcHAL      = "int halGetDeviceInfo(void) { return 0; }\n"
	srcHALOld   = "int halSomethingOlder(void) { return 0; }\n"
	srcACLOnHAL = "extern int halGetDeviceInfo(void);\nint aclInit(const char *configPath) { (void)configPath; return halGetDeviceInfo(); }\n"
)

// needLoader skips tests that dlopen real files when this build cannot.
func needLoader(t testing.TB) {
	t.Helper()
	if !cgoLoader {
		t.Skip("built without cgo: " + errNoCgo.Error())
	}
}

// compileLib builds a shared library from C source at dir/name with gcc
// and returns its path. extra are more gcc arguments (-L, -l, -Wl,...).
func compileLib(t testing.TB, dir, name, src string, extra ...string) string {
	t.Helper()
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("gcc not found; the library tests compile stand-in libraries")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	c := filepath.Join(t.TempDir(), strings.TrimSuffix(name, ".so")+".c")
	if err := os.WriteFile(c, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, name)
	args := append([]string{"-shared", "-fPIC", "-o", out, c}, extra...)
	if b, err := exec.Command(gcc, args...).CombinedOutput(); err != nil {
		t.Fatalf("gcc %s: %v\n%s", strings.Join(args, " "), err, b)
	}
	return out
}

// goodToolkit makes a CANN-like toolkit directory with a loadable
// lib64/libascendcl.so and returns the directory.
func goodToolkit(t testing.TB) string {
	t.Helper()
	home := t.TempDir()
	compileLib(t, filepath.Join(home, "lib64"), Library, srcACL)
	return home
}

func containsAll(t testing.TB, what, s string, subs ...string) {
	t.Helper()
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			t.Errorf("%s %q does not contain %q", what, s, sub)
		}
	}
}

func errorsIs(err, target error) bool { return errors.Is(err, target) }
