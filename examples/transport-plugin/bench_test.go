package transportplugin_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvconnect/kvconnect/plugins/transporttest"
)

// TestBenchMovesBytesThroughThePlugin runs kvconnect's own CLI with
// --protocol simpletcp and the plugin in its plugin_dir: two nodes move
// verified blocks through two simpletcp plugin processes.
func TestBenchMovesBytesThroughThePlugin(t *testing.T) {
	plugin := transporttest.BuildPlugin(t, "./cmd/kvconnect-transport-simpletcp")
	dir := t.TempDir()
	if err := os.Symlink(plugin, filepath.Join(dir, "kvconnect-transport-simpletcp")); err != nil {
		t.Fatal(err)
	}
	// The CLI is built from the kvconnect repository this example lives in
	// (go.mod's replace), the way a user installs it.
	cli := filepath.Join(dir, "kvconnect")
	build := exec.Command("go", "build", "-o", cli, "./cmd/kvconnect")
	build.Dir = filepath.Join("..", "..")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building kvconnect: %v\n%s", err, out)
	}
	cmd := exec.Command(cli, "bench", "--mode", "loopback", "--protocol", "simpletcp", "--plugin-dir", dir,
		"--operation", "write", "--block-size", "256KiB", "--batch-size", "16", "--threads", "2",
		"--buffer-size", "64MiB", "--duration", "300ms", "--verify")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kvconnect bench --protocol simpletcp: %v\n%s", err, out)
	}
	text := string(out)
	if !strings.Contains(text, "transport simpletcp (plugin)") || !strings.Contains(text, "all match") {
		t.Fatalf("bench did not report verified blocks over simpletcp:\n%s", text)
	}
	t.Logf("%s", text)
}
