package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/kvconnect/kvconnect/internal/testbin"
)

func TestMain(m *testing.M) {
	testbin.Main(m)
}

// TestDemoSmall runs the demo binary end to end with a small layout: a
// decode process, a prefill process, the tcp plugin beside them.
func TestDemoSmall(t *testing.T) {
	if _, err := testbin.Build("./cmd/kvconnect-transport-tcp", "kvconnect-transport-tcp"); err != nil {
		t.Fatal(err)
	}
	demo, err := testbin.Build("./examples/pd-disagg", "pd-disagg")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(demo, "-layers", "3", "-blocks", "16", "-block-size", "64KiB", "-batch", "10")
	cmd.Env = append(os.Environ(), "KVCONNECT_PLUGIN_DIR="+filepath.Dir(demo))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("demo failed: %v\n%s", err, out)
	}
	for _, re := range []string{`transport=tcp mode=plugin`, `throughput=[0-9.]+ GB/s`, `verified 48/48 blocks`} {
		if !regexp.MustCompile(re).Match(out) {
			t.Errorf("demo output lacks %s:\n%s", re, out)
		}
	}
}
