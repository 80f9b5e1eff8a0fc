package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/kvconnect/kvconnect/errdefs"
	"github.com/kvconnect/kvconnect/metadata"
)

// TestSGLangEnv maps the SGLang / Mooncake variables onto settings.
func TestSGLangEnv(t *testing.T) {
	l := mustLoad(t, Options{Environ: []string{
		"MOONCAKE_PROTOCOL=rdma",
		"MOONCAKE_DEVICE=mlx5_0,mlx5_1",
		"MOONCAKE_TE_META_DATA_SERVER=P2PHANDSHAKE",
		"MC_TCP_BIND_ADDRESS=10.0.0.5",
		"MC_TRANSFER_TIMEOUT=45",
		"MC_GID_INDEX=3",
		"MC_IB_PORT=2",
		"UNRELATED=1",
	}})
	c := l.Config
	if c.Protocol != "rdma" || c.DeviceName != "mlx5_0,mlx5_1" || c.Metadata != MetadataP2P || c.TransferTimeout != 45*time.Second {
		t.Errorf("config = %+v", c)
	}
	want := map[string]map[string]any{"tcp": {"bind_address": "10.0.0.5"}, "rdma": {"gid_index": float64(3), "ib_port": float64(2)}}
	if !reflect.DeepEqual(c.Transports, want) {
		t.Errorf("transports = %#v, want %#v", c.Transports, want)
	}
	for key, src := range map[string]string{
		"protocol": "env MOONCAKE_PROTOCOL", "device_name": "env MOONCAKE_DEVICE",
		"metadata": "env MOONCAKE_TE_META_DATA_SERVER", "transfer_timeout": "env MC_TRANSFER_TIMEOUT",
		"transports.tcp.bind_address": "env MC_TCP_BIND_ADDRESS",
	} {
		if got := l.Source(key); got != src {
			t.Errorf("source of %s = %q, want %q", key, got, src)
		}
	}
}

// TestMetadataServerEnv: metadata services from SGLang's variable, with
// Mooncake's MC_METADATA_CLUSTER_ID and MC_REDIS_*; the Redis variables
// count only for Redis; a bad string names the variable.
func TestMetadataServerEnv(t *testing.T) {
	for _, v := range []string{"etcd://10.0.0.1:2379", "http://10.0.0.1:8080/metadata", "redis://10.0.0.1:6379", "10.0.0.1:2379,10.0.0.2:2379"} {
		l := mustLoad(t, Options{Environ: []string{"MOONCAKE_TE_META_DATA_SERVER=" + v, "MC_METADATA_CLUSTER_ID=prod"}})
		if l.Config.Metadata != v || l.Source("metadata") != "env MOONCAKE_TE_META_DATA_SERVER" ||
			l.Config.MetadataClusterID != "prod" || l.Source("metadata_cluster_id") != "env MC_METADATA_CLUSTER_ID" {
			t.Errorf("%s: %+v", v, l.Config)
		}
	}
	redisEnv := []string{"MC_REDIS_PASSWORD=s3cret", "MC_REDIS_DB_INDEX=3", "MC_REDIS_USERNAME=kv"}
	l := mustLoad(t, Options{Environ: append([]string{"MOONCAKE_TE_META_DATA_SERVER=redis://10.0.0.1:6379"}, redisEnv...)})
	if c := l.Config; c.MetadataPassword != "s3cret" || c.MetadataRedisDB != 3 || c.MetadataUsername != "kv" || l.Source("metadata_password") != "env MC_REDIS_PASSWORD" {
		t.Errorf("redis: %+v", c)
	}
	if v, _ := l.Value("metadata_password"); v.Value != "(hidden)" {
		t.Errorf("Values shows the password as %v", v.Value)
	}
	l = mustLoad(t, Options{Environ: append([]string{"MOONCAKE_TE_META_DATA_SERVER=etcd://10.0.0.1:2379"}, redisEnv...)})
	if c := l.Config; c.MetadataPassword != "" || c.MetadataRedisDB != 0 || c.MetadataUsername != "" {
		t.Errorf("etcd took the Redis variables: %+v", c)
	}
	notes := strings.Join(l.Notes, "\n")
	if !strings.Contains(notes, "MC_REDIS_PASSWORD is ignored: metadata is not redis://") || strings.Contains(notes, "s3cret") {
		t.Errorf("notes %q", notes)
	}
	l = mustLoad(t, Options{Environ: []string{"MOONCAKE_TE_META_DATA_SERVER=redis://h:1", "MC_REDIS_PASSWORD=a", "KVCONNECT_METADATA_PASSWORD=b"}})
	if l.Config.MetadataPassword != "b" || strings.Contains(strings.Join(l.Notes, " "), "=b") {
		t.Errorf("KVCONNECT_METADATA_PASSWORD: %q, notes %v", l.Config.MetadataPassword, l.Notes)
	}
	_, ps := loadErr(t, Options{Environ: []string{"MOONCAKE_TE_META_DATA_SERVER=etcd://10.0.0.1"}})
	p := findProblem(ps, "metadata")
	if p == nil || !errors.Is(p, errdefs.ErrInvalidArgument) || p.Source != "env MOONCAKE_TE_META_DATA_SERVER" || p.Value != "etcd://10.0.0.1" ||
		!strings.Contains(p.Error(), "not host:port") {
		t.Errorf("bad metadata: %v", ps)
	}
}

// TestMetadataOptions maps the settings onto metadata.Options.
func TestMetadataOptions(t *testing.T) {
	if _, ok := (Config{}).MetadataOptions(nil); ok {
		t.Error("P2PHANDSHAKE has a metadata service")
	}
	c := Config{Metadata: "etcd://h:1", MetadataClusterID: "prod", MetadataUsername: "u", MetadataPassword: "s3cret",
		MetadataRedisDB: 2, MetadataCAFile: "ca", MetadataCertFile: "c", MetadataKeyFile: "k", ConnectTimeout: 3 * time.Second}
	o, ok := c.MetadataOptions(nil)
	want := metadata.Options{URL: "etcd://h:1", ClusterID: "prod", TTL: DefaultMetadataTTL, ConnectTimeout: 3 * time.Second,
		Username: "u", Password: "s3cret", RedisDB: 2, TLS: metadata.TLSFiles{CAFile: "ca", CertFile: "c", KeyFile: "k"}}
	if !ok || !reflect.DeepEqual(o, want) || string(o.Password) != "s3cret" {
		t.Errorf("MetadataOptions = %+v, %v\nwant %+v", o, ok, want)
	}
	js, _ := json.Marshal(c)
	if out := fmt.Sprintf("%v %+v %#v %v %+v %s", c, c, c, o, o, js); strings.Contains(out, "s3cret") {
		t.Errorf("printing the config shows the password: %s", out)
	}
}

// TestForceTCP: MC_FORCE_TCP forces tcp over every layer, flags included,
// and says what it overrode.
func TestForceTCP(t *testing.T) {
	dir := t.TempDir()
	file := writeFile(t, dir, "kvconnect.yaml", "protocol: rdma\n")
	tests := []struct {
		name     string
		opts     Options
		protocol string
		note     string // substring of the note; "" = no note
	}{
		{"file rdma", Options{ConfigFile: file, Environ: []string{"MC_FORCE_TCP=1"}}, "tcp", `was "rdma" from file kvconnect.yaml`},
		{"flag rdma", Options{Environ: []string{"MC_FORCE_TCP=true"}, Flags: flags(t, "--protocol", "rdma")}, "tcp", `was "rdma" from flag --protocol`},
		{"ascend", Options{Environ: []string{"MC_FORCE_TCP=1", "ENABLE_ASCEND_TRANSFER_WITH_MOONCAKE=true"}}, "tcp", `was "ascend"`},
		{"already tcp", Options{Environ: []string{"MC_FORCE_TCP=1", "MOONCAKE_PROTOCOL=tcp"}}, "tcp", ""},
		{"off", Options{ConfigFile: file, Environ: []string{"MC_FORCE_TCP=0"}}, "rdma", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := mustLoad(t, tt.opts)
			if l.Config.Protocol != tt.protocol {
				t.Errorf("protocol = %q, want %q", l.Config.Protocol, tt.protocol)
			}
			notes := strings.Join(l.Notes, "\n")
			if tt.note == "" && strings.Contains(notes, "MC_FORCE_TCP") || tt.note != "" && !strings.Contains(notes, tt.note) {
				t.Errorf("notes %q, want %q", notes, tt.note)
			}
		})
	}
	_, ps := loadErr(t, Options{Environ: []string{"MC_FORCE_TCP=maybe"}})
	if p := findProblem(ps, "MC_FORCE_TCP"); p == nil || !strings.Contains(p.Allowed, "true or false") {
		t.Errorf("MC_FORCE_TCP=maybe: %v", ps)
	}
}

// TestAscendEnv: ENABLE_ASCEND_TRANSFER_WITH_MOONCAKE selects ascend, with
// npu_id from ASCEND_NPU_PHY_ID unless it is -1 or unset, else the local
// device index.
func TestAscendEnv(t *testing.T) {
	tests := []struct {
		name  string
		env   []string
		flags []string
		npuID any
		src   string
	}{
		{"phy id", []string{"ENABLE_ASCEND_TRANSFER_WITH_MOONCAKE=true", "ASCEND_NPU_PHY_ID=5"}, nil, float64(5), "env ASCEND_NPU_PHY_ID"},
		{"phy id -1", []string{"ENABLE_ASCEND_TRANSFER_WITH_MOONCAKE=1", "ASCEND_NPU_PHY_ID=-1", "KVCONNECT_LOCAL_DEVICE_INDEX=3"}, nil,
			float64(3), "env ENABLE_ASCEND_TRANSFER_WITH_MOONCAKE (local_device_index from env KVCONNECT_LOCAL_DEVICE_INDEX)"},
		{"unset, index from flag", []string{"ENABLE_ASCEND_TRANSFER_WITH_MOONCAKE=true"}, []string{"--local-device-index", "2"},
			float64(2), "env ENABLE_ASCEND_TRANSFER_WITH_MOONCAKE (local_device_index from flag --local-device-index)"},
		{"flag wins", []string{"ENABLE_ASCEND_TRANSFER_WITH_MOONCAKE=true", "ASCEND_NPU_PHY_ID=5"}, []string{"--set", "transports.ascend.npu_id=7"},
			float64(7), "flag --set transports.ascend.npu_id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := mustLoad(t, Options{Environ: tt.env, Flags: flags(t, tt.flags...)})
			if l.Config.Protocol != "ascend" || l.Source("protocol") != "env ENABLE_ASCEND_TRANSFER_WITH_MOONCAKE" {
				t.Errorf("protocol = %q from %q", l.Config.Protocol, l.Source("protocol"))
			}
			got := l.Config.Transports["ascend"]["npu_id"]
			if n, ok := got.(int); ok {
				got = float64(n)
			}
			if got != tt.npuID || l.Source("transports.ascend.npu_id") != tt.src {
				t.Errorf("npu_id = %#v from %q, want %v from %q", l.Config.Transports["ascend"]["npu_id"],
					l.Source("transports.ascend.npu_id"), tt.npuID, tt.src)
			}
		})
	}
	l := mustLoad(t, Options{Environ: []string{"ENABLE_ASCEND_TRANSFER_WITH_MOONCAKE=true", "MOONCAKE_PROTOCOL=rdma"}})
	if len(l.Notes) == 0 || !strings.Contains(l.Notes[0], "selects protocol ascend") {
		t.Errorf("notes %v", l.Notes)
	}
	l = mustLoad(t, Options{Environ: []string{"ENABLE_ASCEND_TRANSFER_WITH_MOONCAKE=false", "ASCEND_NPU_PHY_ID=5"}})
	if l.Config.Protocol != DefaultProtocol || l.Config.Transports != nil {
		t.Errorf("disabled ascend changed the config: %+v", l.Config)
	}
	_, ps := loadErr(t, Options{Environ: []string{"ENABLE_ASCEND_TRANSFER_WITH_MOONCAKE=true", "ASCEND_NPU_PHY_ID=npu0"}})
	if p := findProblem(ps, "transports.ascend.npu_id"); p == nil || p.Source != "env ASCEND_NPU_PHY_ID" {
		t.Errorf("bad ASCEND_NPU_PHY_ID: %v", ps)
	}
}

// TestKVConnectEnv: KVCONNECT_* covers every setting and wins over the
// SGLang names, with a note; empty variables count as unset (but the
// secret's: TestEmptyAuthSecretIsAnError).
func TestKVConnectEnv(t *testing.T) {
	env := []string{
		"MOONCAKE_PROTOCOL=rdma", "KVCONNECT_PROTOCOL=ucx",
		"KVCONNECT_HOSTNAME=10.1.1.1", "KVCONNECT_BIND_ADDRESS=10.1.1.2", "KVCONNECT_RPC_PORT=15001",
		"KVCONNECT_ROLE=kv_consumer", "KVCONNECT_ENGINE_ID=e1", "KVCONNECT_LOCAL_DEVICE_INDEX=1",
		"KVCONNECT_BUFFER_SIZE=1GB", "KVCONNECT_BUFFER_DEVICE=cpu", "KVCONNECT_CONNECT_TIMEOUT=3s", "KVCONNECT_PLUGIN_START_TIMEOUT=5s",
		"KVCONNECT_TRANSFER_TIMEOUT=4s", "KVCONNECT_MAX_HANDSHAKE_FRAME=1MiB", "KVCONNECT_MAX_HANDSHAKE_MEMORY=20MiB", "KVCONNECT_PLUGIN_DIR=",
		"KVCONNECT_LOG_LEVEL=debug", "KVCONNECT_LOG_FORMAT=json", "KVCONNECT_DEVICE_NAME=mlx5_4",
		"KVCONNECT_METADATA=etcd://10.0.0.1:2379", "KVCONNECT_FALLBACK=tcp", "KVCONNECT_MOONCAKE_INTEROP=off",
		"KVCONNECT_METADATA_CLUSTER_ID=prod", "KVCONNECT_METADATA_TTL=5s", "KVCONNECT_METADATA_USERNAME=kv",
		"KVCONNECT_METADATA_PASSWORD=pw", "KVCONNECT_METADATA_REDIS_DB=0", "KVCONNECT_METADATA_CA_FILE=",
		"KVCONNECT_METADATA_CERT_FILE=", "KVCONNECT_METADATA_KEY_FILE=",
		"KVCONNECT_METRICS_ADDRESS=127.0.0.1:9464", "KVCONNECT_METRICS_PEER_LABELS=true",
	}
	l := mustLoad(t, Options{Environ: env})
	c := l.Config
	want := Config{Protocol: "ucx", Hostname: "10.1.1.1", BindAddress: "10.1.1.2", RPCPort: 15001, Role: "kv_consumer",
		EngineID: "e1", LocalDeviceIndex: 1, BufferSize: 1e9, BufferDevice: "cpu", ConnectTimeout: 3 * time.Second, PluginStartTimeout: 5 * time.Second,
		TransferTimeout: 4 * time.Second, MaxHandshakeFrame: 1 << 20, MaxHandshakeMemory: 20 << 20, DeviceName: "mlx5_4", Metadata: "etcd://10.0.0.1:2379",
		MetadataClusterID: "prod", MetadataTTL: 5 * time.Second, MetadataUsername: "kv", MetadataPassword: "pw",
		Fallback: []string{"tcp"}, MooncakeInterop: Bool(false), MetricsAddress: "127.0.0.1:9464", MetricsPeerLabels: true,
		Notes: []string{`KVCONNECT_PROTOCOL=ucx overrides protocol "rdma" from env MOONCAKE_PROTOCOL`}}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("config = %+v\nwant     %+v", c, want)
	}
	if l.LogLevel != "debug" || l.LogFormat != "json" {
		t.Errorf("log %q %q", l.LogLevel, l.LogFormat)
	}
	for _, s := range settings {
		if s.key == "auth_secret" || s.key == "auth_secret_file" {
			continue // set empty they are an error: TestEmptyAuthSecretIsAnError, TestAuthSecretFromEnv
		}
		found := false
		for _, kv := range env {
			found = found || strings.HasPrefix(kv, EnvName(s.key)+"=")
		}
		if !found {
			t.Errorf("test does not set %s", EnvName(s.key))
		}
	}
	if len(l.Notes) != 1 || !strings.Contains(l.Notes[0], "KVCONNECT_PROTOCOL=ucx overrides protocol \"rdma\" from env MOONCAKE_PROTOCOL") {
		t.Errorf("notes %v", l.Notes)
	}
}

// TestUnknownKVConnectEnv: a near miss of a KVCONNECT_ name is an error
// with a suggestion; an unrelated KVCONNECT_ variable is a warning; the
// plugin protocol's own variables are not settings.
func TestUnknownKVConnectEnv(t *testing.T) {
	_, ps := loadErr(t, Options{Environ: []string{"KVCONNECT_PROTOCL=rdma"}})
	if p := findProblem(ps, "KVCONNECT_PROTOCL"); p == nil || p.Suggestion != "KVCONNECT_PROTOCOL" || p.Warning {
		t.Errorf("KVCONNECT_PROTOCL: %v", ps)
	}
	_, ps = loadErr(t, Options{Environ: []string{"KVCONNECT_TRANSPORTS_TCP_CONNECTIONS=4"}})
	if p := findProblem(ps, "KVCONNECT_TRANSPORTS_TCP_CONNECTIONS"); p == nil || !strings.Contains(p.Reason, "KVCONNECT_TRANSPORTS__<TRANSPORT>__<OPTION>") {
		t.Errorf("single underscores: %v", ps)
	}
	l := mustLoad(t, Options{Environ: []string{"KVCONNECT_SOMETHING_ELSE_ENTIRELY=1", "KVCONNECT_FD_CHANNEL=3",
		"KVCONNECT_PLUGIN_LOG_LEVEL=debug", "KVCONNECT_TRANSPORT_PLUGIN=x", "KVCONNECT_GRPC_MAX_MESSAGE=5",
		"KVCONNECT_PLUGIN_RINGS=0", "KVCONNECT_PLUGIN_CPUPROFILE=/tmp/p.prof", "KVCONNECT_RING_HOST_SPIN=10us", "KVCONNECT_RING_PLUGIN_SPIN=0"}})
	if len(l.Warnings) != 1 || l.Warnings[0].Key != "KVCONNECT_SOMETHING_ELSE_ENTIRELY" {
		t.Errorf("warnings %v", l.Warnings)
	}
}

// TestParseEnvFile reads KEY=VALUE files as SGLang users keep them.
func TestParseEnvFile(t *testing.T) {
	in := `# comment
export MOONCAKE_PROTOCOL=rdma
MOONCAKE_DEVICE='{"0": "mlx5_0"}'
KVCONNECT_ENGINE_ID="a b"   
MC_IB_PORT=1 # trailing comment

`
	env, err := ParseEnvFile("x.env", []byte(in))
	want := []string{"MOONCAKE_PROTOCOL=rdma", `MOONCAKE_DEVICE={"0": "mlx5_0"}`, "KVCONNECT_ENGINE_ID=a b", "MC_IB_PORT=1"}
	if err != nil || !reflect.DeepEqual(env, want) {
		t.Errorf("ParseEnvFile = %q, %v; want %q", env, err, want)
	}
	_, err = ParseEnvFile("x.env", []byte("A=1\nnot an assignment\n"))
	ps := Problems(err)
	if len(ps) != 1 || ps[0].Source != "file x.env line 2" {
		t.Errorf("malformed line: %v", err)
	}
}

// TestMCForceHCAMeansNoFallback: Mooncake's MC_FORCE_HCA=1 (fail rather
// than fall back to TCP without RDMA devices) is strict mode, with its
// source; KVCONNECT_FALLBACK overrides it; a value that is not a boolean
// is a problem naming the variable.
func TestMCForceHCAMeansNoFallback(t *testing.T) {
	ld, err := Load(Options{Environ: []string{"MOONCAKE_PROTOCOL=rdma", "MC_FORCE_HCA=1"}})
	if err != nil {
		t.Fatal(err)
	}
	if fb := ld.Config.Fallback; fb == nil || len(fb) != 0 {
		t.Fatalf("fallback %#v with MC_FORCE_HCA=1, want [] (strict)", fb)
	}
	if ld, err = Load(Options{Environ: []string{"MC_FORCE_HCA=0"}}); err != nil || ld.Config.Fallback != nil {
		t.Fatalf("MC_FORCE_HCA=0: fallback %#v, %v; want unset", ld.Config.Fallback, err)
	}
	if ld, err = Load(Options{Environ: []string{"MC_FORCE_HCA=1", "KVCONNECT_FALLBACK=tcp"}}); err != nil || len(ld.Config.Fallback) != 1 {
		t.Fatalf("KVCONNECT_FALLBACK over MC_FORCE_HCA: fallback %#v, %v; want [tcp]", ld.Config.Fallback, err)
	}
	_, err = Load(Options{Environ: []string{"MC_FORCE_HCA=maybe"}})
	if ps := Problems(err); len(ps) != 1 || ps[0].Key != "MC_FORCE_HCA" {
		t.Fatalf("MC_FORCE_HCA=maybe: %v, want a problem naming it", err)
	}
}
