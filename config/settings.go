package config

import (
	"sort"
	"strings"

	"github.com/kvconnect/kvconnect/units"
)

type kind int

const (
	kindString kind = iota
	kindInt
	kindDuration
	kindSize
	kindList
	kindDevice // a string, or a map per local device index
	kindBool
	kindSecret // a string never shown (auth.Secret)
)

// describe says what a value of the kind looks like, for "want ..." texts.
func (k kind) describe() string {
	switch k {
	case kindInt:
		return "an integer"
	case kindDuration:
		return "a duration like 30s, 500ms or a number of seconds"
	case kindSize:
		return "a size like 64MiB, 1GB or a whole number of bytes"
	case kindList:
		return `a list of transport names like [ucx, tcp] or "ucx,tcp" ([] or "none" for no fallback)`
	case kindDevice:
		return `a device name, a comma list, a JSON map per local device index, or a path to a .json file`
	case kindBool:
		return boolAllowed
	case kindSecret:
		return "a secret string of at least 16 bytes"
	}
	return "a string"
}

// setting describes one configuration key.
type setting struct {
	key     string
	kind    kind
	def     any // the default as a display value; nil = not set
	help    string
	allowed []string // for strings with a fixed set of values
	flag    string   // flag name; "" = none (secrets: flags show in ps)
	min     int64    // for ints
	max     int64
	secret  bool // never shown: config show, notes and problems mask it
}

// Roles lists the roles a node may take.
func Roles() []string { return []string{"kv_producer", "kv_consumer", "kv_both"} }

// BufferDevices lists the buffer_device values that are accepted. Only cpu
// holds KV regions; the others load with a warning (see buffer_device).
func BufferDevices() []string { return []string{"cpu", "cuda", "npu", "xpu"} }

// LogLevels lists the log_level values.
func LogLevels() []string { return []string{"debug", "info", "warn", "error"} }

// LogFormats lists the log_format values.
func LogFormats() []string { return []string{"console", "json"} }

var settings = []setting{
	{key: "protocol", kind: kindString, def: DefaultProtocol, flag: "protocol",
		help: "transport to use first: tcp, rdma, ucx, efa, ascend, or a third-party plugin's name"},
	{key: "fallback", kind: kindList, def: nil, flag: "fallback",
		help: `transports to try, in order, when protocol fails to initialise; unset = the default chain for protocol; "none" or [] = strict mode (no fallback)`},
	{key: "device_name", kind: kindDevice, def: "", flag: "device-name",
		help: `device(s) for the transport: empty = auto, "mlx5_0", "mlx5_0,mlx5_1", a JSON map per local device index {"0":"mlx5_0","1":"mlx5_1"}, or a path to a .json file holding that map`},
	{key: "hostname", kind: kindString, def: DefaultHostname, flag: "hostname",
		help: "host name or IP address peers use to reach this node; empty = this host's outward address (the source address of the default route)"},
	{key: "bind_address", kind: kindString, def: "", flag: "bind-address",
		help: "local address the RPC (handshake) port listens on; empty = all interfaces"},
	{key: "rpc_port", kind: kindInt, def: 0, flag: "rpc-port", min: 0, max: 65535,
		help: "RPC (handshake) port; 0 picks a free one"},
	{key: "metadata", kind: kindString, def: MetadataP2P, flag: "metadata",
		help: "metadata mode: P2PHANDSHAKE (peers exchange descriptors over their RPC ports), or a metadata service: etcd://host:port[,host:port], a bare host:port (etcd), http(s)://host:port/path, redis(s)://host:port[/db]"},
	{key: "metadata_cluster_id", kind: kindString, def: "", flag: "metadata-cluster-id",
		help: "cluster id in the metadata keys: mooncake/<id>/ram/<segment> (Mooncake's MC_METADATA_CLUSTER_ID); empty = mooncake/ram/<segment>"},
	{key: "metadata_ttl", kind: kindDuration, def: DefaultMetadataTTL.String(), flag: "metadata-ttl",
		help: "how long this node's metadata keys outlive it: etcd lease TTL, Redis and HTTP expiry; renewed every third of it (at least 1s)"},
	{key: "metadata_username", kind: kindString, def: "", flag: "metadata-username",
		help: "user name for the metadata service: etcd user, Redis ACL user (MC_REDIS_USERNAME), HTTP basic auth"},
	{key: "metadata_password", kind: kindString, def: "", flag: "metadata-password", secret: true,
		help: "password for the metadata service: etcd user's, Redis requirepass/ACL (MC_REDIS_PASSWORD), HTTP basic auth; never shown"},
	{key: "metadata_redis_db", kind: kindInt, def: 0, flag: "metadata-redis-db", min: 0, max: 1 << 20,
		help: "Redis database index (Mooncake's MC_REDIS_DB_INDEX); redis://host:port/db says the same"},
	{key: "metadata_ca_file", kind: kindString, def: "", flag: "metadata-ca-file",
		help: "PEM CA bundle that verifies the metadata server (etcd TLS, https://, rediss://); empty = system roots"},
	{key: "metadata_cert_file", kind: kindString, def: "", flag: "metadata-cert-file",
		help: "PEM client certificate for the metadata service (with metadata_key_file); for etcd any of the three files turns TLS on"},
	{key: "metadata_key_file", kind: kindString, def: "", flag: "metadata-key-file",
		help: "PEM private key of metadata_cert_file"},
	{key: "role", kind: kindString, def: "kv_both", flag: "role", allowed: Roles(),
		help: "kv_producer (prefill), kv_consumer (decode) or kv_both"},
	{key: "engine_id", kind: kindString, def: "", flag: "engine-id",
		help: "identifies the serving engine instance (vLLM's engine_id)"},
	{key: "local_device_index", kind: kindInt, def: 0, flag: "local-device-index", min: 0, max: 1 << 16,
		help: "this worker's local device (GPU/NPU) index or rank; picks its entry of a per-device device_name map (vLLM's kv_rank)"},
	{key: "buffer_size", kind: kindSize, def: uint64(0), flag: "buffer-size",
		help: "KV buffer size in bytes (vLLM's kv_buffer_size); 0 = not set"},
	{key: "buffer_device", kind: kindString, def: "cpu", flag: "buffer-device", allowed: BufferDevices(),
		help: "where KV buffers live: cpu (cuda, npu and xpu are not supported yet)"},
	{key: "connect_timeout", kind: kindDuration, def: DefaultConnectTimeout.String(), flag: "connect-timeout",
		help: "bound on opening a peer (handshake and transport connect)"},
	{key: "plugin_start_timeout", kind: kindDuration, def: DefaultPluginStartTimeout.String(), flag: "plugin-start-timeout",
		help: "bound on starting a transport plugin process and its handshake"},
	{key: "transfer_timeout", kind: kindDuration, def: DefaultTransferTimeout.String(), flag: "transfer-timeout",
		help: "bound on a batch whose context has no deadline (Mooncake's MC_TRANSFER_TIMEOUT)"},
	{key: "max_handshake_frame", kind: kindSize, def: units.FormatSize(DefaultMaxHandshakeFrame), flag: "max-handshake-frame",
		help: "largest handshake frame accepted (at least 4096 bytes)"},
	{key: "max_handshake_memory", kind: kindSize, def: units.FormatSize(DefaultMaxHandshakeMemory), flag: "max-handshake-memory",
		help: "memory the node holds at most for handshake frames being received, whatever the number of peers; a frame that does not fit waits (at most the handshake's timeout) or is refused; at least twice max_handshake_frame plus 16MiB kept for small requests"},
	{key: "plugin_dir", kind: kindString, def: "", flag: "plugin-dir",
		help: "directory searched first for kvconnect-transport-<name> binaries"},
	{key: "mooncake_interop", kind: kindBool, def: true, flag: "mooncake-interop",
		help: "serve and open unmodified Mooncake Transfer Engine peers over Mooncake's TCP protocol (whenever tcp is up)"},
	{key: "auth_secret", kind: kindSecret, def: nil, secret: true,
		help: "shared secret peers must prove they hold (HMAC challenge-response) on every handshake and data connection; at least 16 bytes; never logged; set by env or file, not by flag (flags show in ps); see docs/SECURITY.md"},
	{key: "auth_secret_file", kind: kindString, def: "", flag: "auth-secret-file",
		help: "file holding the auth secret(s), one per line: the node proves itself with the first and accepts any (rotation); instead of auth_secret"},
	{key: "metrics_address", kind: kindString, def: "", flag: "metrics-address",
		help: "host:port (or :port, host = bind_address) of the HTTP endpoint serving /metrics (Prometheus), /healthz, /readyz and /status; port 0 picks a free one; empty = off; see docs/OBSERVABILITY.md"},
	{key: "metrics_peer_labels", kind: kindBool, def: false, flag: "metrics-peer-labels",
		help: "label the initiated transfer metrics and batch latency with the peer's session id (one set of series per peer: small clusters only)"},
	{key: "log_level", kind: kindString, def: "info", flag: "log-level", allowed: LogLevels(),
		help: "log level: debug, info, warn or error"},
	{key: "log_format", kind: kindString, def: "console", flag: "log-format", allowed: LogFormats(),
		help: "log format: console or json"},
}

// Keys that are not settings but have a meaning in a config file.
const (
	transportsKey = "transports"
	vllmKey       = "kv_transfer_config"
)

// redisOnlyEnv are the compatible variables Mooncake reads only for a
// Redis metadata service: elsewhere they are ignored, with a note.
var redisOnlyEnv = map[string]bool{"MC_REDIS_USERNAME": true, "MC_REDIS_PASSWORD": true, "MC_REDIS_DB_INDEX": true}

// isSecret says whether key's value must never be shown.
func isSecret(key string) bool {
	s, ok := lookupSetting(key)
	return ok && (s.secret || s.kind == kindSecret)
}

// hidden stands for a secret value that is set.
const hidden = "(hidden)"

func lookupSetting(key string) (*setting, bool) {
	for i := range settings {
		if settings[i].key == key {
			return &settings[i], true
		}
	}
	return nil, false
}

// fileKeys are the top-level keys a kvconnect config file may hold.
func fileKeys() []string {
	out := make([]string, 0, len(settings)+2)
	for _, s := range settings {
		out = append(out, s.key)
	}
	out = append(out, transportsKey, vllmKey)
	sort.Strings(out)
	return out
}

// SettingKeys lists every setting key, sorted, with the transport subtree
// as transports.<transport>.<option>.
func SettingKeys() []string {
	out := make([]string, 0, len(settings)+1)
	for _, s := range settings {
		out = append(out, s.key)
	}
	out = append(out, transportsKey+".<transport>.<option>")
	sort.Strings(out)
	return out
}

// envPrefix starts every kvconnect environment variable.
const envPrefix = "KVCONNECT_"

// Environment variables that name inputs rather than settings.
const (
	// EnvConfigFile names the config file when --config is not given.
	EnvConfigFile = "KVCONNECT_CONFIG"
	// EnvKVTransferConfig holds a vLLM kv_transfer_config (JSON, @file or a
	// path to a .json file) when --kv-transfer-config is not given.
	EnvKVTransferConfig = "KVCONNECT_KV_TRANSFER_CONFIG"
)

// internalEnv are KVCONNECT_ variables that are not settings (the plugin
// protocol's own variables, and the inputs above).
var internalEnv = map[string]bool{
	EnvConfigFile:                true,
	EnvKVTransferConfig:          true,
	"KVCONNECT_FD_CHANNEL":       true,
	"KVCONNECT_GRPC_MAX_MESSAGE": true,
	"KVCONNECT_PLUGIN_LOG_LEVEL": true,
	"KVCONNECT_TRANSPORT_PLUGIN": true,
	// The plugin data path's switches and tuning knobs (docs/DATAPATH.md).
	"KVCONNECT_PLUGIN_RINGS":      true,
	"KVCONNECT_PLUGIN_CPUPROFILE": true,
	"KVCONNECT_RING_HOST_SPIN":    true,
	"KVCONNECT_RING_PLUGIN_SPIN":  true,
	"KVCONNECT_TCP_SPIN":          true,
	// Read by transports (the rdma transport's test-only tcp lanes).
	"KVCONNECT_ALLOW_TESTING_OPTIONS": true,
	// Read by tests and make bench: where Mooncake's binaries are.
	"KVCONNECT_MOONCAKE_BIN": true,
	// Read by the Python package (docs/PYTHON.md): the libkvconnect.so to
	// load; and by its tests: the directory of the built binaries.
	"KVCONNECT_LIBRARY": true,
	"KVCONNECT_BIN":     true,
	// Read by tests: the library make test built, the race-built
	// executables, and whether the long tests run (make test-long).
	"KVCONNECT_TEST_LIBKVCONNECT": true,
	"KVCONNECT_TESTBIN_RACE_DIR":  true,
	"KVCONNECT_TEST_LONG":         true,
}

// EnvName is the KVCONNECT_* variable for a key: upper case, levels
// separated by a double underscore (transports.tcp.connections ->
// KVCONNECT_TRANSPORTS__TCP__CONNECTIONS).
func EnvName(key string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(key, ".", "__"))
}

// keyForEnv maps a KVCONNECT_* variable back to a key: single underscores
// stay (rpc_port), double underscores separate levels.
func keyForEnv(name string) string {
	rest := strings.TrimPrefix(name, envPrefix)
	return strings.ToLower(strings.ReplaceAll(rest, "__", "."))
}

// CompatEnv describes an environment variable from SGLang or Mooncake that
// kvconnect reads.
type CompatEnv struct {
	Name string // MOONCAKE_PROTOCOL
	Key  string // the setting it feeds, or "" when it acts otherwise
	Help string
}

// CompatEnvs lists the compatible environment variables, in the order
// they apply (later wins within the environment layer; KVCONNECT_*
// variables win over all of them; MC_FORCE_TCP is applied after every
// layer, flags included).
func CompatEnvs() []CompatEnv { return append([]CompatEnv(nil), compatEnvs...) }

var compatEnvs = []CompatEnv{
	{"MOONCAKE_PROTOCOL", "protocol", "SGLang: transport protocol"},
	{"MOONCAKE_DEVICE", "device_name", "SGLang: device name(s), the same formats as device_name"},
	{"MOONCAKE_TE_META_DATA_SERVER", "metadata", "SGLang: metadata server (P2PHANDSHAKE, etcd://, host:port, http://, redis://)"},
	{"MC_METADATA_CLUSTER_ID", "metadata_cluster_id", "Mooncake: cluster id in the metadata keys (mooncake/<id>/...)"},
	{"MC_REDIS_USERNAME", "metadata_username", "Mooncake: Redis user name; read only when metadata is redis:// or rediss://"},
	{"MC_REDIS_PASSWORD", "metadata_password", "Mooncake: Redis password; read only when metadata is redis:// or rediss://"},
	{"MC_REDIS_DB_INDEX", "metadata_redis_db", "Mooncake: Redis database index; read only when metadata is redis:// or rediss://"},
	{"MC_TCP_BIND_ADDRESS", "transports.tcp.bind_address", "Mooncake: local address the tcp transport binds"},
	{"MC_TCP_PROTO", "transports.tcp.mooncake_proto", "Mooncake: 1 speaks Mooncake's TCP protocol v1 to Mooncake peers even when they advertise v2"},
	{"MC_TRANSFER_TIMEOUT", "transfer_timeout", "Mooncake: transfer timeout in seconds"},
	{"MC_LOG_LEVEL", "log_level", "Mooncake: TRACE or INFO, WARNING, ERROR (TRACE reads as debug)"},
	{"MC_GID_INDEX", "transports.rdma.gid_index", "Mooncake: GID table index of the RDMA device (RoCE)"},
	{"MC_IB_PORT", "transports.rdma.ib_port", "Mooncake: port of the RDMA device, from 1"},
	{"ENABLE_ASCEND_TRANSFER_WITH_MOONCAKE", "protocol", "SGLang: true selects protocol ascend, with transports.ascend.npu_id from ASCEND_NPU_PHY_ID"},
	{"ASCEND_NPU_PHY_ID", "transports.ascend.npu_id", "SGLang: physical NPU id used with ENABLE_ASCEND_TRANSFER_WITH_MOONCAKE; -1 or unset = local_device_index"},
	{"MC_FORCE_HCA", "fallback", "Mooncake: true requires the protocol's devices (RDMA): no fallback, as fallback: [] (KVCONNECT_FALLBACK and --fallback override it)"},
	{"MC_FORCE_TCP", "protocol", "Mooncake: true forces protocol tcp whatever else says otherwise, flags included"},
}
