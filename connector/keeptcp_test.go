package connector_test

import (
	"context"
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
	dir := testbin.PluginDir(t, "ucx") // no tcp plugin: tcp fails to start
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
