package config

import (
	"strings"
	"testing"
)

// TestMooncakeLogLevel: MC_LOG_LEVEL sets log_level as Mooncake reads it;
// a value Mooncake ignores is ignored with a warning; KVCONNECT_LOG_LEVEL
// wins.
func TestMooncakeLogLevel(t *testing.T) {
	for _, tc := range []struct {
		env    []string
		level  string
		source string
		warn   bool
	}{
		{[]string{"MC_LOG_LEVEL=WARNING"}, "warn", "env MC_LOG_LEVEL", false},
		{[]string{"MC_LOG_LEVEL=TRACE"}, "debug", "env MC_LOG_LEVEL", false},
		{[]string{"MC_LOG_LEVEL=INFO"}, "info", "env MC_LOG_LEVEL", false},
		{[]string{"MC_LOG_LEVEL=error"}, "error", "env MC_LOG_LEVEL", false},
		{[]string{"MC_LOG_LEVEL=verbose"}, "info", "default", true},
		{[]string{"MC_LOG_LEVEL=ERROR", "KVCONNECT_LOG_LEVEL=debug"}, "debug", "env KVCONNECT_LOG_LEVEL", false},
	} {
		l := mustLoad(t, Options{Environ: tc.env})
		if l.LogLevel != tc.level || l.Source("log_level") != tc.source {
			t.Errorf("%v: log_level %q from %q, want %q from %q", tc.env, l.LogLevel, l.Source("log_level"), tc.level, tc.source)
		}
		p := findProblem(l.Warnings, "MC_LOG_LEVEL")
		if (p != nil) != tc.warn {
			t.Errorf("%v: warning %v, want one: %v", tc.env, p, tc.warn)
		}
		if p != nil && (!strings.Contains(p.Error(), "verbose") || !strings.Contains(p.Error(), "WARNING")) {
			t.Errorf("%v: warning %q names neither the value nor what is allowed", tc.env, p.Error())
		}
	}
}

// TestMooncakeVariablesKVConnectDoesNotRead: each Mooncake Transfer Engine
// variable that has no effect here is said once, with what kvconnect has
// instead; the ones it reads, other programs' MC_* variables and those the
// caller reads itself are not.
func TestMooncakeVariablesKVConnectDoesNotRead(t *testing.T) {
	env := []string{
		"MC_MTU=1024", "MC_TCP_ENABLE_CONNECTION_POOL=1", "MC_HANDSHAKE_MAX_LENGTH=10485760", "MC_USE_NVLINK_IPC=1",
		"MC_MIN_RPC_PORT=16000", "MC_TRANSFER_TIMEOUT=5", "MC_GID_INDEX=3", "MC_STORE_MEMCPY=1", "MC_FORCE_TCP=1",
	}
	l := mustLoad(t, Options{Environ: env})
	for name, hint := range map[string]string{
		"MC_MTU":                        "transports.rdma.gid_index",
		"MC_TCP_ENABLE_CONNECTION_POOL": "transports.tcp.connections",
		"MC_HANDSHAKE_MAX_LENGTH":       "max_handshake_frame",
		"MC_USE_NVLINK_IPC":             "",
		"MC_MIN_RPC_PORT":               "rpc_port",
	} {
		p := findProblem(l.Warnings, name)
		if p == nil {
			t.Errorf("%s: no warning; warnings: %s", name, problemKeys(l.Warnings))
			continue
		}
		if !strings.Contains(p.Error(), "kvconnect does not read") || !strings.Contains(p.Error(), hint) || p.Source != "env "+name {
			t.Errorf("%s: warning %q (source %q), want it to say it is not read and name %q", name, p.Error(), p.Source, hint)
		}
	}
	for _, name := range []string{"MC_TRANSFER_TIMEOUT", "MC_GID_INDEX", "MC_STORE_MEMCPY", "MC_FORCE_TCP"} {
		if p := findProblem(l.Warnings, name); p != nil {
			t.Errorf("%s: warned %q; it is read, or not Mooncake's Transfer Engine's", name, p.Error())
		}
	}
	if n := len(l.Warnings); n != 5 {
		t.Errorf("%d warnings, want one per unread variable (5): %s", n, problemKeys(l.Warnings))
	}
	l = mustLoad(t, Options{Environ: env, CallerEnv: []string{"MC_MIN_RPC_PORT"}})
	if p := findProblem(l.Warnings, "MC_MIN_RPC_PORT"); p != nil {
		t.Errorf("MC_MIN_RPC_PORT warned although the caller reads it: %q", p.Error())
	}
}
