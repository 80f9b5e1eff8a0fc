package tcp_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/transports/tcp"
)

// TestParseOptions: a configuration's transports.tcp subtree reads as
// Init reads it: defaults for what it leaves out, and every bad key or
// value refused naming the key.
func TestParseOptions(t *testing.T) {
	o, err := tcp.ParseOptions(nil)
	if err != nil || o != tcp.DefaultOptions() {
		t.Fatalf("no subtree: %+v, %v; want the defaults", o, err)
	}
	o, err = tcp.ParseOptions(map[string]any{"connections": int64(8), "op_timeout": "2s"})
	if err != nil || o.Connections != 8 || time.Duration(o.OpTimeout) != 2*time.Second || o.ChunkSize != tcp.DefaultOptions().ChunkSize {
		t.Fatalf("connections 8, op_timeout 2s: %+v, %v", o, err)
	}
	for _, bad := range []struct {
		subtree map[string]any
		key     string
	}{
		{map[string]any{"connections": 0}, "transports.tcp.connections"},
		{map[string]any{"connections": 2.5}, "connections"},
		{map[string]any{"connections": "many"}, "connections"},
		{map[string]any{"conections": 4}, "conections"},
	} {
		_, err := tcp.ParseOptions(bad.subtree)
		if !errors.Is(err, plugins.ErrInvalidArgument) || !strings.Contains(err.Error(), bad.key) {
			t.Errorf("%v: %v, want ErrInvalidArgument naming %s", bad.subtree, err, bad.key)
		}
	}
}
