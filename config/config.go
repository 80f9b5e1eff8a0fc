package config

import (
	"time"

	"go.uber.org/zap"

	"github.com/kvconnect/kvconnect/auth"
	"github.com/kvconnect/kvconnect/metadata"
)

// MetadataP2P is the metadata mode in which peers exchange segment
// descriptors directly over their RPC ports (Mooncake's P2PHANDSHAKE).
const MetadataP2P = metadata.P2P

// Config is what a kvconnect node needs (connector.Config is this type).
// The zero value works: unset fields take the defaults documented on each
// field. Load builds it from files, vLLM/SGLang settings, environment and
// flags; embedders may also fill it in code.
type Config struct {
	// Hostname is the host peers use to reach this node. Empty (the
	// default) means this host's outward address: the source address of
	// the default route, else the first interface that is up, else
	// loopback (with a warning), as vLLM's get_ip() picks it. A name must
	// resolve.
	Hostname string `koanf:"hostname" json:"hostname"`
	// BindAddress is the local address the RPC (handshake) port listens
	// on; empty means all interfaces.
	BindAddress string `koanf:"bind_address" json:"bind_address,omitempty"`
	// RPCPort is the handshake port; 0 picks a free one.
	RPCPort int `koanf:"rpc_port" json:"rpc_port"`
	// Protocol is the transport to try first: tcp (default), rdma, ucx,
	// efa, ascend, or a third-party plugin's name.
	Protocol string `koanf:"protocol" json:"protocol"`
	// Metadata is the metadata mode: P2PHANDSHAKE (default: peers
	// exchange segment descriptors over their RPC ports) or a metadata
	// service's connection string: etcd://host:port[,host:port...], a
	// bare host:port (etcd, as in Mooncake), http(s)://host:port/path
	// (Mooncake's HTTP metadata protocol), redis(s)://host:port[/db]. See
	// package metadata and MetadataOptions.
	Metadata string `koanf:"metadata" json:"metadata"`
	// MetadataClusterID puts the metadata keys under mooncake/<id>/
	// (Mooncake's MC_METADATA_CLUSTER_ID).
	MetadataClusterID string `koanf:"metadata_cluster_id" json:"metadata_cluster_id,omitempty"`
	// MetadataTTL is how long this node's metadata keys outlive it (etcd
	// lease TTL, Redis and HTTP expiry). Default 10s, at least 1s.
	MetadataTTL time.Duration `koanf:"metadata_ttl" json:"metadata_ttl"`
	// MetadataUsername and MetadataPassword authenticate to the metadata
	// service (etcd user, Redis ACL user and password, HTTP basic auth).
	// The password is a metadata.Secret: fmt prints it as (hidden), JSON
	// leaves it out.
	MetadataUsername string          `koanf:"metadata_username" json:"metadata_username,omitempty"`
	MetadataPassword metadata.Secret `koanf:"metadata_password" json:"-"`
	// MetadataRedisDB is the Redis database index (MC_REDIS_DB_INDEX).
	MetadataRedisDB int `koanf:"metadata_redis_db" json:"metadata_redis_db,omitempty"`
	// MetadataCAFile, MetadataCertFile and MetadataKeyFile are PEM files:
	// the CA that verifies the metadata server and the client certificate
	// and key (etcd TLS, https://, rediss://).
	MetadataCAFile   string `koanf:"metadata_ca_file" json:"metadata_ca_file,omitempty"`
	MetadataCertFile string `koanf:"metadata_cert_file" json:"metadata_cert_file,omitempty"`
	MetadataKeyFile  string `koanf:"metadata_key_file" json:"metadata_key_file,omitempty"`
	// DeviceName is passed to the transport: empty (auto), a device name
	// or a comma list (mlx5_0,mlx5_1). Load resolves a per-device map
	// (JSON or a .json file) for LocalDeviceIndex; see ResolveDeviceName.
	DeviceName string `koanf:"device_name" json:"device_name"`
	// PluginDir is searched first for kvconnect-transport-<name> binaries.
	PluginDir string `koanf:"plugin_dir" json:"plugin_dir"`
	// ConnectTimeout bounds opening a peer (handshake + transport connect).
	// Default 10s.
	ConnectTimeout time.Duration `koanf:"connect_timeout" json:"connect_timeout"`
	// PluginStartTimeout bounds starting a transport plugin process and
	// its handshake. Default 10s.
	PluginStartTimeout time.Duration `koanf:"plugin_start_timeout" json:"plugin_start_timeout"`
	// TransferTimeout bounds a batch whose context has no deadline
	// (Mooncake's MC_TRANSFER_TIMEOUT). Default 30s.
	TransferTimeout time.Duration `koanf:"transfer_timeout" json:"transfer_timeout"`
	// MaxHandshakeFrame bounds one handshake frame. Default 16 MiB.
	MaxHandshakeFrame int `koanf:"max_handshake_frame" json:"max_handshake_frame"`
	// MaxHandshakeMemory bounds the memory the node holds for handshake
	// frames being received, whatever the number of peers: requests on
	// its RPC port and the replies to its own handshakes. Of it,
	// HandshakeSmallReserve is kept for requests of up to
	// HandshakeSmallFrame (one per connection the RPC port holds, so a
	// real peer's request always fits); requests may hold half of the
	// rest, the node's own handshakes all of what requests leave. A
	// frame that does not fit waits, for at most the handshake's timeout,
	// then is refused (errdefs.ErrResourceExhausted). Default 64 MiB, or
	// MinHandshakeMemory(MaxHandshakeFrame) when that is more; when set,
	// at least MinHandshakeMemory(MaxHandshakeFrame).
	MaxHandshakeMemory int `koanf:"max_handshake_memory" json:"max_handshake_memory"`
	// Fallback lists the transports to try, in order, when Protocol fails
	// to initialise. nil means the default chain for Protocol; an empty
	// non-nil list is strict mode: no fallback.
	Fallback []string `koanf:"fallback" json:"fallback"`
	// Role is kv_producer, kv_consumer or kv_both (default).
	Role string `koanf:"role" json:"role"`
	// EngineID identifies the serving engine instance (vLLM's engine_id).
	EngineID string `koanf:"engine_id" json:"engine_id,omitempty"`
	// LocalDeviceIndex is this worker's local device (GPU/NPU) index, used
	// to pick its entry of a per-device device_name map (vLLM's kv_rank).
	LocalDeviceIndex int `koanf:"local_device_index" json:"local_device_index"`
	// BufferSize is the KV buffer size in bytes (vLLM's kv_buffer_size).
	BufferSize uint64 `koanf:"buffer_size" json:"buffer_size,omitempty"`
	// BufferDevice is where KV buffers live: cpu (default). cuda and npu
	// are not supported yet.
	BufferDevice string `koanf:"buffer_device" json:"buffer_device"`
	// MooncakeInterop makes the node a peer of unmodified Mooncake Transfer
	// Engines whenever tcp is up: its handshake answers Mooncake's, its
	// descriptor is Mooncake's TCP segment descriptor, its tcp data port
	// speaks Mooncake's TCP protocol, and Open reaches Mooncake nodes.
	// nil means true (use config.Bool(false) to turn it off).
	MooncakeInterop *bool `koanf:"mooncake_interop" json:"mooncake_interop,omitempty"`
	// AuthSecret turns peer authentication on: peers must prove they hold
	// it (see package auth) on every handshake and data connection. At
	// least 16 bytes; never logged or shown. Set it or AuthSecretFile, not
	// both. With a secret, Mooncake peers (which cannot authenticate) are
	// refused, so MooncakeInterop must not be set to true.
	AuthSecret auth.Secret `koanf:"auth_secret" json:"auth_secret,omitempty"`
	// AuthSecretFile is a file holding the secret(s), one per line (blank
	// lines and lines starting with # are skipped): the node proves itself
	// with the first and accepts any of them, so a secret can be rotated.
	AuthSecretFile string `koanf:"auth_secret_file" json:"auth_secret_file,omitempty"`
	// MetricsAddress is where the node serves /metrics (Prometheus),
	// /healthz, /readyz and /status over HTTP: host:port, or :port (or a
	// bare port) to listen on BindAddress. Port 0 picks a free one (the
	// node's Status says which). Empty (the default) means off.
	MetricsAddress string `koanf:"metrics_address" json:"metrics_address,omitempty"`
	// MetricsPeerLabels adds a peer label (the peer's session id) to the
	// initiated transfer metrics and the batch latency: one set of series
	// per peer, for small clusters only. Default false.
	MetricsPeerLabels bool `koanf:"metrics_peer_labels" json:"metrics_peer_labels,omitempty"`
	// Notes are what Load decided about conflicting inputs ("MC_FORCE_TCP=1
	// forces protocol tcp (was rdma from file kvconnect.yaml)"); a node
	// shows them in its Status. Not a setting.
	Notes []string `koanf:"-" json:"-"`
	// Transports holds each transport's own options subtree
	// (transports.tcp.connections, ...), handed to it as JSON.
	Transports map[string]map[string]any `koanf:"transports" json:"transports,omitempty"`
}

// Defaults used for zero fields.
const (
	DefaultHostname           = "" // the outward address, found at start
	DefaultProtocol           = "tcp"
	DefaultConnectTimeout     = 10 * time.Second
	DefaultPluginStartTimeout = 10 * time.Second
	DefaultTransferTimeout    = 30 * time.Second
	DefaultMaxHandshakeFrame  = 16 << 20
	DefaultMaxHandshakeMemory = 64 << 20
	DefaultMetadataTTL        = metadata.DefaultTTL
	DefaultRole               = "kv_both"
	DefaultBufferDevice       = "cpu"
)

// Handshake memory (see Config.MaxHandshakeMemory).
const (
	// HandshakeSmallFrame is the largest handshake request read from the
	// memory kept for small requests: every request kvconnect and
	// Mooncake send (descriptor, probe, RDMA connect) but long
	// notifications fits.
	HandshakeSmallFrame = 4 << 10
	// HandshakeSmallReserve is the part of max_handshake_memory kept for
	// requests of up to HandshakeSmallFrame: one for each of the at most
	// 4096 connections a node's RPC port holds at once.
	HandshakeSmallReserve = 4096 * HandshakeSmallFrame
)

// MinHandshakeMemory is the least max_handshake_memory that can receive
// frames of maxFrame bytes: the small requests' reserve, plus twice
// maxFrame, since requests may hold only half of the rest.
func MinHandshakeMemory(maxFrame int) int { return HandshakeSmallReserve + 2*maxFrame }

// Bool returns a pointer to b, for Config's optional booleans.
func Bool(b bool) *bool { return &b }

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.Protocol == "" {
		c.Protocol = DefaultProtocol
	}
	if c.Metadata == "" {
		c.Metadata = MetadataP2P
	}
	if c.MetadataTTL == 0 {
		c.MetadataTTL = DefaultMetadataTTL
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = DefaultConnectTimeout
	}
	if c.PluginStartTimeout == 0 {
		c.PluginStartTimeout = DefaultPluginStartTimeout
	}
	if c.TransferTimeout == 0 {
		c.TransferTimeout = DefaultTransferTimeout
	}
	if c.MaxHandshakeFrame == 0 {
		c.MaxHandshakeFrame = DefaultMaxHandshakeFrame
	}
	if c.MaxHandshakeMemory == 0 {
		c.MaxHandshakeMemory = max(DefaultMaxHandshakeMemory, MinHandshakeMemory(c.MaxHandshakeFrame))
	}
	if c.Role == "" {
		c.Role = DefaultRole
	}
	if c.BufferDevice == "" {
		c.BufferDevice = DefaultBufferDevice
	}
	if c.MooncakeInterop == nil {
		c.MooncakeInterop = Bool(true)
	}
	return c
}

// Validate checks a Config (zero fields stand for their defaults) and
// returns every problem at once, joined with errors.Join: each is a
// *Problem naming the field's key, its value and what is allowed, and
// wraps ErrInvalid (errdefs.ErrInvalidArgument) or errdefs.ErrNotSupported.
// Use Problems(err) or errors.As to inspect them.
func (c Config) Validate() error {
	ck := &checker{}
	ck.check(&c)
	return joinProblems(ck.errs)
}

// MetadataOptions maps the metadata settings onto metadata.Options for
// metadata.Open, with log as the service's logger (may be nil). ok is
// false in P2PHANDSHAKE mode (no metadata service: do not call
// metadata.Open). Zero fields take the defaults (connect_timeout bounds
// metadata.Open and each request).
func (c Config) MetadataOptions(log *zap.Logger) (o metadata.Options, ok bool) {
	c = c.WithDefaults()
	if metadata.IsP2P(c.Metadata) {
		return metadata.Options{}, false
	}
	return metadata.Options{
		URL:            c.Metadata,
		ClusterID:      c.MetadataClusterID,
		TTL:            c.MetadataTTL,
		ConnectTimeout: c.ConnectTimeout,
		Username:       c.MetadataUsername,
		Password:       c.MetadataPassword,
		RedisDB:        c.MetadataRedisDB,
		TLS:            metadata.TLSFiles{CAFile: c.MetadataCAFile, CertFile: c.MetadataCertFile, KeyFile: c.MetadataKeyFile},
		Log:            log,
	}, true
}
