package connector_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/kvconnect/kvconnect/connector"
	"github.com/kvconnect/kvconnect/internal/testbin"
)

// TestKeepTCPDoesNotRetryAFailedTCP: with tcp in the chain before the
// transport that came up, and tcp failing there, keep-tcp does not start
// it a second time: each transport is tried once, and the log says why
// tcp is not kept beside the one that runs.
func TestKeepTCPDoesNotRetryAFailedTCP(t *testing.T) {
	// A plugin dir of its own: the ucx plugin, and a tcp plugin that
	// exits at once, so tcp fails to start (found first, in plugin_dir,
	// whatever else is installed).
	dir := t.TempDir()
	ucx := filepath.Join(testbin.PluginDir(t, "ucx"), "kvconnect-transport-ucx")
	if err := os.Symlink(ucx, filepath.Join(dir, "kvconnect-transport-ucx")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "kvconnect-transport-tcp"), []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zap.WarnLevel)
	cfg := connector.Config{Protocol: "nosuch", Fallback: []string{"tcp", "ucx"}, PluginDir: dir}
	c, err := connector.New(context.Background(), cfg, connector.WithLogger(zap.New(core)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	st := c.Status()
	if st.Transport != "ucx" || len(st.Attempts) != 3 || len(st.Transports) != 1 {
		t.Fatalf("status: transport %q, %d attempts, %d transports up; want ucx after nosuch and tcp failed, ucx alone up",
			st.Transport, len(st.Attempts), len(st.Transports))
	}
	if n := logs.FilterMessageSnippet("could not also keep tcp up").Len(); n != 0 {
		t.Errorf("tcp started a second time for keep-tcp (%d lines)", n)
	}
	if n := logs.FilterMessageSnippet("failed to start earlier in the chain").Len(); n != 1 {
		t.Errorf("%d lines saying why tcp is not kept, want 1: %v", n, logs.All())
	}
}
