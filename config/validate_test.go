package config

import (
	"errors"
	"strings"
	"testing"

	"github.com/kvconnect/kvconnect/errdefs"
	"github.com/kvconnect/kvconnect/internal/pluginpath"
	"github.com/kvconnect/kvconnect/transports/names"
)

// TestValidationProblems: each kind of bad input is a problem naming the
// key, the value, its source and what is allowed, with a suggestion when
// one is close.
func TestValidationProblems(t *testing.T) {
	tests := []struct {
		name       string
		file       string // YAML
		env        []string
		flags      []string
		key        string
		value      any
		source     string
		suggestion string
		want       string // substring of the message
		notSupp    bool   // wraps ErrNotSupported rather than ErrInvalidArgument
	}{
		{name: "protocol typo", file: "protocol: rdam", key: "protocol", value: "rdam", source: "file c.yaml", suggestion: "rdma", want: "want rdma, ucx, efa, ascend, tcp"},
		{name: "protocol case", env: []string{"MOONCAKE_PROTOCOL=RDMA"}, key: "protocol", value: "RDMA", source: "env MOONCAKE_PROTOCOL", suggestion: "rdma"},
		{name: "role typo", file: "role: kv_prodcuer", key: "role", value: "kv_prodcuer", source: "file c.yaml", suggestion: "kv_producer", want: "kv_producer, kv_consumer, kv_both"},
		{name: "unknown key", file: "devcie_name: mlx5_0", key: "devcie_name", source: "file c.yaml", suggestion: "device_name", want: "unknown key"},
		{name: "vLLM key in own file", file: "kv_role: kv_producer", key: "kv_role", source: "file c.yaml", suggestion: "role", want: "put it under kv_transfer_config"},
		{name: "transport at top level", file: "tcp: {connections: 4}", key: "tcp", source: "file c.yaml", suggestion: "transports.tcp"},
		{name: "transport name typo", file: "transports: {tpc: {connections: 4}}", key: "transports.tpc", source: "file c.yaml", suggestion: "transports.tcp"},
		{name: "transport not a map", file: "transports: {tcp: 4}", key: "transports.tcp", value: 4, source: "file c.yaml", want: "a map of options"},
		{name: "fallback typo", file: "fallback: [ucx, tpc]", key: "fallback", source: "file c.yaml", suggestion: "tcp", want: `entry "tpc"`},
		{name: "fallback not names", file: "fallback: [1, 2]", key: "fallback", source: "file c.yaml", want: "list of transport names"},
		{name: "rpc_port range", flags: []string{"--rpc-port", "70000"}, key: "rpc_port", value: "70000", source: "flag --rpc-port", want: "between 0 and 65535"},
		{name: "rpc_port type", file: "rpc_port: [1]", key: "rpc_port", source: "file c.yaml", want: "an integer"},
		{name: "duration", env: []string{"KVCONNECT_CONNECT_TIMEOUT=soon"}, key: "connect_timeout", value: "soon", source: "env KVCONNECT_CONNECT_TIMEOUT", want: "30s"},
		{name: "size", file: "buffer_size: lots", key: "buffer_size", value: "lots", source: "file c.yaml", want: "64MiB"},
		{name: "log level", flags: []string{"--log-level", "debg"}, key: "log_level", value: "debg", source: "flag --log-level", suggestion: "debug"},
		{name: "buffer device typo", file: "buffer_device: cpuu", key: "buffer_device", suggestion: "cpu"},
		{name: "metadata empty endpoint", file: "metadata: etcd://10.0.0.1:2379,", key: "metadata", value: "etcd://10.0.0.1:2379,", want: "an empty endpoint between separators; want P2PHANDSHAKE, etcd://"},
		{name: "metadata scheme", env: []string{"MOONCAKE_TE_META_DATA_SERVER=consul://h:1"}, key: "metadata", value: "consul://h:1", source: "env MOONCAKE_TE_META_DATA_SERVER", want: `unknown scheme "consul"`},
		{name: "metadata bare host", flags: []string{"--metadata", "10.0.0.1"}, key: "metadata", value: "10.0.0.1", source: "flag --metadata", want: "not host:port"},
		{name: "metadata typo", file: "metadata: P2PHANDSHAK", key: "metadata", suggestion: "P2PHANDSHAKE"},
		{name: "metadata password hidden", file: "metadata: redis://:s3cret@h:1/x", key: "metadata", want: `database "x"`},
		{name: "metadata ttl", file: "metadata_ttl: 500ms", key: "metadata_ttl", want: "at least 1s"},
		{name: "metadata redis db", env: []string{"KVCONNECT_METADATA_REDIS_DB=-1"}, key: "metadata_redis_db", want: "between 0 and"},
		{name: "metadata db twice", file: "metadata: redis://h:1/2\nmetadata_redis_db: 3", key: "metadata_redis_db", want: "names database 2"},
		{name: "metadata tls on plain redis", file: "metadata: redis://h:1\nmetadata_ca_file: /etc/hosts", key: "metadata_ca_file", want: "rediss:// or https:// for TLS"},
		{name: "metadata cert without key", file: "metadata: etcd://h:1\nmetadata_cert_file: /etc/hosts", key: "metadata_cert_file", want: "set without metadata_key_file"},
		{name: "metadata missing CA file", file: "metadata: etcd://h:1\nmetadata_ca_file: /nonexistent/ca.pem", key: "metadata_ca_file", value: "/nonexistent/ca.pem", want: "cannot be read"},
		{name: "metadata password without user", file: "metadata: etcd://h:1\nmetadata_password: pw", key: "metadata_username", want: "without a user name"},
		{name: "metadata password not a string", file: "metadata_password: [1, 2]", key: "metadata_password", value: "(hidden)", want: "a string"},
		{name: "metadata case", file: "metadata: p2phandshake", key: "metadata", suggestion: "P2PHANDSHAKE"},
		{name: "hostname with port", file: "hostname: 10.0.0.1:15001", key: "hostname", want: "without a port"},
		{name: "hostname ascend segment", file: "hostname: 10.0.0.1:15001:npu_3", key: "hostname", want: "ascend transport builds"},
		{name: "max handshake frame", file: "max_handshake_frame: 100", key: "max_handshake_frame", want: "at least 4096"},
		{name: "max handshake memory", file: "max_handshake_memory: 40MiB", key: "max_handshake_memory", want: "at least 48MiB (twice max_handshake_frame plus 16MiB)"},
		{name: "max handshake memory below a raised frame", file: "max_handshake_frame: 32MiB", key: "max_handshake_memory", source: "default", want: "at least 80MiB"},
		{name: "set unknown key", flags: []string{"--set", "protocl=tcp"}, key: "protocl", source: "flag --set protocl", suggestion: "protocol"},
		{name: "set without =", flags: []string{"--set", "protocol"}, key: "set", want: "KEY=VALUE"},
		{name: "transports not a map", file: "transports: [tcp]", key: "transports", want: "map of transport name"},
		{name: "transport option not JSON", file: "transports: {tcp: {x: .nan}}", key: "transports.tcp.x", want: "as JSON"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := Options{Environ: tt.env, Flags: flags(t, tt.flags...)}
			if tt.file != "" {
				opts.ConfigFile = writeFile(t, t.TempDir(), "c.yaml", tt.file+"\n")
			}
			_, ps := loadErr(t, opts)
			p := findProblem(ps, tt.key)
			if p == nil {
				t.Fatalf("no problem about %s in %v", tt.key, ps)
			}
			msg := p.Error()
			if tt.value != nil && p.Value != tt.value {
				t.Errorf("value = %#v, want %#v", p.Value, tt.value)
			}
			if tt.source != "" && p.Source != tt.source {
				t.Errorf("source = %q, want %q", p.Source, tt.source)
			}
			if p.Suggestion != tt.suggestion {
				t.Errorf("suggestion = %q, want %q (%s)", p.Suggestion, tt.suggestion, msg)
			}
			if tt.suggestion != "" && !strings.Contains(msg, `did you mean "`+tt.suggestion+`"?`) {
				t.Errorf("%q does not suggest %q", msg, tt.suggestion)
			}
			if !strings.Contains(msg, tt.want) || !strings.Contains(msg, tt.key) {
				t.Errorf("%q does not name %q and %q", msg, tt.key, tt.want)
			}
			if strings.Contains(msg, "s3cret") {
				t.Errorf("%q shows a password", msg)
			}
			if p.Source != "" && !strings.Contains(msg, p.Source) {
				t.Errorf("%q does not name its source %q", msg, p.Source)
			}
			wantErr := errdefs.ErrInvalidArgument
			if tt.notSupp {
				wantErr = errdefs.ErrNotSupported
			}
			if !errors.Is(p, wantErr) {
				t.Errorf("%q does not wrap %v", msg, wantErr)
			}
		})
	}
}

// TestAllProblemsAtOnce: three mistakes give three problems, each
// reachable with errors.As / Problems, all wrapping ErrInvalidArgument.
func TestAllProblemsAtOnce(t *testing.T) {
	file := writeFile(t, t.TempDir(), "three.yaml", "protocol: rdam\nrole: kv_prodcuer\ndevcie_name: mlx5_0\n")
	l, err := Load(Options{ConfigFile: file, Environ: []string{}})
	if l == nil {
		t.Fatal("Load returned no Loaded with its error")
	}
	ps := Problems(err)
	if got := problemKeys(ps); got != "devcie_name,role,protocol" {
		t.Errorf("problems about %s, want devcie_name,role,protocol: %v", got, err)
	}
	for _, p := range ps {
		if p.Suggestion == "" {
			t.Errorf("%v has no suggestion", p)
		}
	}
	if !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("%v does not wrap ErrInvalidArgument", err)
	}
	var p *Problem
	if !errors.As(err, &p) || p.Key != "devcie_name" {
		t.Errorf("errors.As gives %v", p)
	}
	if n := strings.Count(err.Error(), "\n") + 1; n != 3 {
		t.Errorf("error has %d lines, want 3:\n%v", n, err)
	}
}

// TestOverriddenBadValueStillReported: a bad value in a lower layer is
// reported even when a higher layer overrides it.
func TestOverriddenBadValueStillReported(t *testing.T) {
	file := writeFile(t, t.TempDir(), "c.yaml", "rpc_port: many\n")
	_, ps := loadErr(t, Options{ConfigFile: file, Flags: flags(t, "--rpc-port", "5")})
	if p := findProblem(ps, "rpc_port"); p == nil || p.Source != "file c.yaml" {
		t.Errorf("problems %v", ps)
	}
}

// TestFileProblems: unreadable, unparsable and mis-named files.
func TestFileProblems(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name, file, content, want string
	}{
		{"missing", "", "", "cannot read the file"},
		{"extension", "c.ini", "protocol=tcp", `unknown file extension ".ini"`},
		{"yaml syntax", "c.yaml", "protocol: [tcp\n", "cannot parse YAML"},
		{"toml syntax", "c.toml", "protocol = \n", "cannot parse TOML"},
		{"json syntax", "c.json", "{\n\"protocol\": \"tcp\",\n}", "cannot parse JSON: line 3"},
		{"json array", "c.json", `["tcp"]`, "cannot parse JSON"},
		{"yaml scalar", "c.yaml", "just a string\n", "cannot parse YAML"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := dir + "/missing.yaml"
			if tt.file != "" {
				path = writeFile(t, dir, tt.file, tt.content)
			}
			_, ps := loadErr(t, Options{ConfigFile: path})
			if !strings.Contains(ps[0].Error(), tt.want) {
				t.Errorf("%q does not mention %q", ps[0], tt.want)
			}
		})
	}
}

// TestWarnings: things that do not stop loading but deserve a look.
func TestWarnings(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name, file, key, want string
	}{
		{"fallback repeats protocol", "protocol: rdma\nfallback: [rdma, tcp]", "fallback", "is the protocol itself"},
		{"fallback duplicate", "fallback: [ucx, ucx]", "fallback", "more than once"},
		{"third-party transport without plugin", "protocol: zzzthirdparty", "protocol", "no plugin kvconnect-transport-zzzthirdparty"},
		{"options for an unused third-party transport", "transports: {zzzother: {x: 1}}", "transports.zzzother", "neither the protocol"},
		{"plugin_dir missing", "plugin_dir: " + dir + "/nope", "plugin_dir", "not a directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := mustLoad(t, Options{ConfigFile: writeFile(t, dir, "w.yaml", tt.file+"\n")})
			p := findProblem(l.Warnings, tt.key)
			if p == nil || !p.Warning || !strings.Contains(p.Error(), tt.want) {
				t.Errorf("warnings %v, want one about %s saying %q", l.Warnings, tt.key, tt.want)
			}
		})
	}
}

// TestThirdPartyPluginInPluginDir: a name close to a built-in transport
// is fine when its plugin is installed.
func TestThirdPartyPluginInPluginDir(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, pluginpath.BinaryPrefix+"ucx2", "#!/bin/sh\n")
	if err := chmodX(dir + "/" + pluginpath.BinaryPrefix + "ucx2"); err != nil {
		t.Fatal(err)
	}
	_, ps := loadErr(t, Options{Flags: flags(t, "--protocol", "ucx2")})
	if p := findProblem(ps, "protocol"); p == nil || p.Suggestion != "ucx" {
		t.Errorf("ucx2 without a plugin: %v", ps)
	}
	l := mustLoad(t, Options{Flags: flags(t, "--protocol", "ucx2", "--plugin-dir", dir)})
	if l.Config.Protocol != "ucx2" || len(l.Warnings) != 0 {
		t.Errorf("protocol %q, warnings %v", l.Config.Protocol, l.Warnings)
	}
}

// TestCatalogOption: a transport the caller's catalog knows is not taken
// for a typo of a built-in one, and needs no plugin on disk.
func TestCatalogOption(t *testing.T) {
	_, ps := loadErr(t, Options{Flags: flags(t, "--protocol", "ucx2")})
	if p := findProblem(ps, "protocol"); p == nil {
		t.Fatalf("ucx2 with the built-in names: no problem in %v", ps)
	}
	l := mustLoad(t, Options{Flags: flags(t, "--protocol", "ucx2"), Catalog: catalogOf{append(names.Builtin(), "ucx2")}})
	if l.Config.Protocol != "ucx2" || len(l.Warnings) != 0 {
		t.Errorf("protocol %q, warnings %v", l.Config.Protocol, l.Warnings)
	}
}

type catalogOf struct{ names []string }

func (c catalogOf) Names() []string { return c.names }

// TestConfigValidate: Validate on a Config built in code reports every
// problem, joined, and accepts the zero value.
func TestConfigValidate(t *testing.T) {
	if err := (Config{}).Validate(); err != nil {
		t.Errorf("zero Config: %v", err)
	}
	if err := (Config{Protocol: "thirdparty", Fallback: []string{"alsomissing"}}).Validate(); err != nil {
		t.Errorf("third-party names must pass Validate: %v", err)
	}
	err := Config{Protocol: "RDMA!", RPCPort: 70000, Role: "boss", BufferDevice: "cuda", Metadata: "etcd://x",
		Hostname: "a b", MaxHandshakeFrame: 10, Fallback: []string{""},
		Transports: map[string]map[string]any{"Bad Name": {"x": 1}}}.Validate()
	want := "hostname,rpc_port,protocol,fallback,metadata,role,max_handshake_frame,transports.Bad Name"
	if got := problemKeys(Problems(err)); got != want {
		t.Errorf("problems about %s\nwant %s\n%v", got, want, err)
	}
	if !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("joined error should match ErrInvalidArgument: %v", err)
	}
}

// TestProblemText fixes the one-line format.
func TestProblemText(t *testing.T) {
	tests := []struct {
		p    Problem
		want string
	}{
		{Problem{Key: "protocol", Value: "rdam", Source: "file a.yaml", Reason: "unknown transport", Allowed: "tcp, rdma", Suggestion: "rdma"},
			`config: protocol = "rdam" (from file a.yaml): unknown transport; want tcp, rdma; did you mean "rdma"?`},
		{Problem{Key: "devcie_name", Source: "file a.yaml", Reason: "unknown key", Suggestion: "device_name"},
			`config: devcie_name (from file a.yaml): unknown key; did you mean "device_name"?`},
		{Problem{Source: "file a.yaml", Reason: "cannot parse YAML"}, `config: file a.yaml: cannot parse YAML`},
		{Problem{Key: "rpc_port", Value: 70000, Allowed: "an integer"}, `config: rpc_port = 70000: want an integer`},
	}
	for _, tt := range tests {
		if got := tt.p.Error(); got != tt.want {
			t.Errorf("got  %s\nwant %s", got, tt.want)
		}
	}
}

// TestClosest fixes the suggestion threshold.
func TestClosest(t *testing.T) {
	tests := []struct{ in, want string }{
		{"rdam", "rdma"}, {"tpc", "tcp"}, {"kv_prodcuer", "kv_producer"}, {"devcie_name", "device_name"},
		{"RDMA", "rdma"}, {"x", ""}, {"nvlink", ""}, {"tcp", ""}, {"fail", ""}, {"device_nxxx", ""}, {"device_nxme", "device_name"},
	}
	for _, tt := range tests {
		if got := closest(tt.in, append(names.Builtin(), "kv_producer", "device_name")); got != tt.want {
			t.Errorf("closest(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
