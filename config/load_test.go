package config

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

// TestPrecedence walks the layers from the bottom up: each one overrides
// the ones below it, and the source names the winner.
func TestPrecedence(t *testing.T) {
	dir := t.TempDir()
	file := writeFile(t, dir, "kvconnect.yaml", "protocol: rdma\nrpc_port: 1001\n")
	vllm := `{"kv_connector":"MooncakeConnector","kv_port":1002,"kv_connector_extra_config":{"mooncake_protocol":"ucx"}}`
	tests := []struct {
		name       string
		opts       Options
		protocol   string
		protoSrc   string
		rpcPort    int
		rpcPortSrc string
	}{
		{"defaults", Options{}, "tcp", "default", 0, "default"},
		{"code over defaults", Options{Base: &Config{Protocol: "efa", RPCPort: 1000}},
			"efa", "code", 1000, "code"},
		{"file over code", Options{Base: &Config{Protocol: "efa", RPCPort: 1000}, ConfigFile: file},
			"rdma", "file kvconnect.yaml", 1001, "file kvconnect.yaml"},
		{"kv_transfer_config over file", Options{ConfigFile: file, KVTransferConfig: vllm},
			"ucx", "kv_transfer_config kv_connector_extra_config.mooncake_protocol", 1002, "kv_transfer_config kv_port"},
		{"env over kv_transfer_config", Options{ConfigFile: file, KVTransferConfig: vllm,
			Environ: []string{"MOONCAKE_PROTOCOL=tcp", "KVCONNECT_RPC_PORT=1003"}},
			"tcp", "env MOONCAKE_PROTOCOL", 1003, "env KVCONNECT_RPC_PORT"},
		{"flags over env", Options{ConfigFile: file, KVTransferConfig: vllm,
			Environ: []string{"MOONCAKE_PROTOCOL=tcp", "KVCONNECT_RPC_PORT=1003"},
			Flags:   flags(t, "--protocol", "efa", "--rpc-port", "1004")},
			"efa", "flag --protocol", 1004, "flag --rpc-port"},
		{"MC_FORCE_TCP over flags", Options{ConfigFile: file,
			Environ: []string{"MC_FORCE_TCP=1"}, Flags: flags(t, "--protocol", "rdma")},
			"tcp", "env MC_FORCE_TCP", 1001, "file kvconnect.yaml"},
		{"--set over named flags", Options{Flags: flags(t, "--rpc-port", "1004", "--set", "rpc_port=1005")},
			"tcp", "default", 1005, "flag --set rpc_port"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := mustLoad(t, tt.opts)
			if l.Config.Protocol != tt.protocol || l.Source("protocol") != tt.protoSrc {
				t.Errorf("protocol = %q from %q, want %q from %q", l.Config.Protocol, l.Source("protocol"), tt.protocol, tt.protoSrc)
			}
			if l.Config.RPCPort != tt.rpcPort || l.Source("rpc_port") != tt.rpcPortSrc {
				t.Errorf("rpc_port = %d from %q, want %d from %q", l.Config.RPCPort, l.Source("rpc_port"), tt.rpcPort, tt.rpcPortSrc)
			}
		})
	}
}

// TestConfigFileLocation: --config, then $KVCONNECT_CONFIG.
func TestConfigFileLocation(t *testing.T) {
	dir := t.TempDir()
	a := writeFile(t, dir, "a.yaml", "engine_id: from-a\n")
	b := writeFile(t, dir, "b.yaml", "engine_id: from-b\n")
	tests := []struct {
		name string
		opts Options
		want string
	}{
		{"env", Options{Environ: []string{"KVCONNECT_CONFIG=" + a}}, "from-a"},
		{"flag beats env", Options{Environ: []string{"KVCONNECT_CONFIG=" + a}, Flags: flags(t, "--config", b)}, "from-b"},
		{"option beats flag", Options{ConfigFile: a, Flags: flags(t, "--config", b)}, "from-a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := mustLoad(t, tt.opts).Config.EngineID; got != tt.want {
				t.Errorf("engine_id = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestFileFormats loads the same settings from YAML, TOML and JSON.
func TestFileFormats(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"c.yaml": `
protocol: rdma
fallback: [ucx, tcp]
rpc_port: 15001
connect_timeout: 2s
buffer_size: 64MiB
transports:
  tcp:
    connections: 8
    bind_address: 10.0.0.1
`,
		"c.yml": `{protocol: rdma, fallback: [ucx, tcp], rpc_port: 15001, connect_timeout: 2s, buffer_size: 64MiB,
  transports: {tcp: {connections: 8, bind_address: 10.0.0.1}}}`,
		"c.toml": `
protocol = "rdma"
fallback = ["ucx", "tcp"]
rpc_port = 15001
connect_timeout = "2s"
buffer_size = "64MiB"
[transports.tcp]
connections = 8
bind_address = "10.0.0.1"
`,
		"c.json": `{"protocol": "rdma", "fallback": ["ucx", "tcp"], "rpc_port": 15001, "connect_timeout": 2,
  "buffer_size": 67108864, "transports": {"tcp": {"connections": 8, "bind_address": "10.0.0.1"}}}`,
	}
	var want []byte
	for _, name := range []string{"c.yaml", "c.yml", "c.toml", "c.json"} {
		l := mustLoad(t, Options{ConfigFile: writeFile(t, dir, name, files[name])})
		c := l.Config
		if c.Protocol != "rdma" || !reflect.DeepEqual(c.Fallback, []string{"ucx", "tcp"}) || c.RPCPort != 15001 ||
			c.ConnectTimeout != 2*time.Second || c.BufferSize != 64<<20 {
			t.Errorf("%s: %+v", name, c)
		}
		if l.Source("transports.tcp.connections") != "file "+name {
			t.Errorf("%s: transports.tcp.connections from %q", name, l.Source("transports.tcp.connections"))
		}
		got, _ := json.Marshal(c)
		if want == nil {
			want = got
		} else if string(got) != string(want) {
			t.Errorf("%s gives %s, c.yaml %s", name, got, want)
		}
	}
}

// TestFallbackSetVersusUnset: nil means the default chain, an empty list
// strict mode, from every layer.
func TestFallbackSetVersusUnset(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name string
		opts Options
		want []string // nil = unset
	}{
		{"unset", Options{}, nil},
		{"file null", Options{ConfigFile: writeFile(t, dir, "null.yaml", "fallback:\n")}, nil},
		{"file []", Options{ConfigFile: writeFile(t, dir, "empty.yaml", "fallback: []\n")}, []string{}},
		{"file list", Options{ConfigFile: writeFile(t, dir, "list.yaml", "fallback: [ucx, tcp]\n")}, []string{"ucx", "tcp"}},
		{"file string", Options{ConfigFile: writeFile(t, dir, "str.yaml", "fallback: 'ucx, tcp'\n")}, []string{"ucx", "tcp"}},
		{"env none", Options{Environ: []string{"KVCONNECT_FALLBACK=none"}}, []string{}},
		{"env JSON list", Options{Environ: []string{`KVCONNECT_FALLBACK=["tcp"]`}}, []string{"tcp"}},
		{"env empty is unset", Options{Environ: []string{"KVCONNECT_FALLBACK="}}, nil},
		{"flag empty", Options{Flags: flags(t, "--fallback", "")}, []string{}},
		{"flag list", Options{Flags: flags(t, "--fallback", "ucx,tcp")}, []string{"ucx", "tcp"}},
		{"code empty", Options{Base: &Config{Fallback: []string{}}}, []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := mustLoad(t, tt.opts).Config.Fallback
			if (got == nil) != (tt.want == nil) || !reflect.DeepEqual(got, tt.want) && len(tt.want) > 0 {
				t.Errorf("fallback = %#v, want %#v", got, tt.want)
			}
		})
	}
}

// TestTransportOptions: the subtree reaches Config.Transports; env and
// flag strings that look like JSON numbers or booleans become them; file
// strings stay strings.
func TestTransportOptions(t *testing.T) {
	dir := t.TempDir()
	file := writeFile(t, dir, "t.yaml", `
transports:
  tcp:
    connections: 4
    chunk_size: "8"
  ucx:
    tls: rc,sm
`)
	l := mustLoad(t, Options{ConfigFile: file,
		Environ: []string{"KVCONNECT_TRANSPORTS__TCP__CONNECTIONS=8", "KVCONNECT_TRANSPORTS__UCX__ZCOPY=true", "MC_TCP_BIND_ADDRESS=10.0.0.2"},
		Flags:   flags(t, "--set", "transports.rdma.gid_index=3", "--set", "transports.ucx.tls=tcp")})
	want := map[string]map[string]any{
		"tcp":  {"connections": float64(8), "chunk_size": "8", "bind_address": "10.0.0.2"},
		"ucx":  {"tls": "tcp", "zcopy": true},
		"rdma": {"gid_index": float64(3)},
	}
	if !reflect.DeepEqual(l.Config.Transports, want) {
		t.Errorf("Transports = %#v\nwant %#v", l.Config.Transports, want)
	}
	for key, src := range map[string]string{
		"transports.tcp.connections":  "env KVCONNECT_TRANSPORTS__TCP__CONNECTIONS",
		"transports.tcp.chunk_size":   "file t.yaml",
		"transports.tcp.bind_address": "env MC_TCP_BIND_ADDRESS",
		"transports.ucx.tls":          "flag --set transports.ucx.tls",
	} {
		if got := l.Source(key); got != src {
			t.Errorf("source of %s = %q, want %q", key, got, src)
		}
	}
	b, err := json.Marshal(l.Config.Transports["tcp"])
	if err != nil || !strings.Contains(string(b), `"connections":8`) {
		t.Errorf("tcp options as JSON: %s, %v", b, err)
	}
}

// TestValues: every setting is listed with a value and a source.
func TestValues(t *testing.T) {
	l := mustLoad(t, Options{Flags: flags(t, "--connect-timeout", "2s", "--buffer-size", "1GiB")})
	seen := map[string]Value{}
	for _, v := range l.Values() {
		seen[v.Key] = v
		if v.Source == "" {
			t.Errorf("%s has no source", v.Key)
		}
	}
	for _, s := range settings {
		if _, ok := seen[s.key]; !ok {
			t.Errorf("Values lacks %s", s.key)
		}
	}
	if v := seen["connect_timeout"]; v.Value != "2s" || v.Source != "flag --connect-timeout" {
		t.Errorf("connect_timeout = %+v", v)
	}
	if v := seen["buffer_size"]; v.Value != uint64(1<<30) {
		t.Errorf("buffer_size = %#v", v.Value)
	}
	if v := seen["fallback"]; v.Value != nil {
		t.Errorf("unset fallback shows %#v", v.Value)
	}
	if l.LogLevel != "info" || l.LogFormat != "console" {
		t.Errorf("log %q %q", l.LogLevel, l.LogFormat)
	}
}

// TestBaseConfig: a Config built in code is validated and completed, and
// its per-device device_name map resolved.
func TestBaseConfig(t *testing.T) {
	l := mustLoad(t, Options{Base: &Config{Protocol: "rdma", LocalDeviceIndex: 1,
		DeviceName: `{"0":"mlx5_0","1":"mlx5_1"}`, Transports: map[string]map[string]any{"tcp": {"connections": 2}}}})
	c := l.Config
	if c.DeviceName != "mlx5_1" || c.Hostname != DefaultHostname || c.Transports["tcp"]["connections"] != 2 {
		t.Errorf("config = %+v", c)
	}
	if err := c.Validate(); err != nil {
		t.Errorf("loaded config does not validate: %v", err)
	}
}

// TestCommandLocalFlagNotASetting: a command's own flag that shares a
// name with a setting flag (bench --buffer-size) is not read as the
// setting; only flags RegisterFlags added count.
func TestCommandLocalFlagNotASetting(t *testing.T) {
	fs := pflag.NewFlagSet("bench", pflag.ContinueOnError)
	fs.String("buffer-size", "256MiB", "bench's own flag")
	persistent := pflag.NewFlagSet("root", pflag.ContinueOnError)
	RegisterFlags(persistent)
	fs.AddFlagSet(persistent) // as cobra merges inherited flags: the local one stays
	if err := fs.Parse([]string{"--buffer-size", "1GiB", "--protocol", "ucx"}); err != nil {
		t.Fatal(err)
	}
	l := mustLoad(t, Options{Flags: fs})
	if l.Config.BufferSize != 0 || l.Source("buffer_size") != "default" || l.Config.Protocol != "ucx" {
		t.Errorf("buffer_size %d from %q, protocol %q", l.Config.BufferSize, l.Source("buffer_size"), l.Config.Protocol)
	}
}

// TestDottedTransportKeys: transports.tcp.connections written as one key,
// as the docs spell it, works in YAML and TOML.
func TestDottedTransportKeys(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{
		"d.yaml": "transports.tcp.connections: 4\n",
		"d.toml": "\"transports.tcp.connections\" = 4\n",
	} {
		l := mustLoad(t, Options{ConfigFile: writeFile(t, dir, name, content)})
		if n, _ := toInt(l.Config.Transports["tcp"]["connections"]); n != 4 {
			t.Errorf("%s: transports = %#v", name, l.Config.Transports)
		}
	}
}
