package config

import (
	"fmt"
	"strings"
	"time"

	"github.com/kvconnect/kvconnect/plugins"
)

// MetadataP2P is the metadata mode in which peers exchange segment
// descriptors directly over their RPC ports (Mooncake's P2PHANDSHAKE).
const MetadataP2P = "P2PHANDSHAKE"

// Config is what a kvconnect node needs (connector.Config is this type).
// The zero value works: unset fields take the defaults documented on each
// field. Load builds it from files, vLLM/SGLang settings, environment and
// flags; embedders may also fill it in code.
type Config struct {
	// Hostname is the host peers use to reach this node. Default 127.0.0.1.
	Hostname string `koanf:"hostname" json:"hostname"`
	// RPCPort is the handshake port; 0 picks a free one.
	RPCPort int `koanf:"rpc_port" json:"rpc_port"`
	// Protocol is the transport to use: tcp (default).
	Protocol string `koanf:"protocol" json:"protocol"`
	// Metadata is the metadata mode; only P2PHANDSHAKE (default) for now.
	Metadata string `koanf:"metadata" json:"metadata"`
	// DeviceName is passed to the transport (RDMA device list and so on).
	DeviceName string `koanf:"device_name" json:"device_name"`
	// PluginDir is searched first for kvconnect-transport-<name> binaries.
	PluginDir string `koanf:"plugin_dir" json:"plugin_dir"`
	// ConnectTimeout bounds opening a peer (handshake + transport connect).
	// Default 10s.
	ConnectTimeout time.Duration `koanf:"connect_timeout" json:"connect_timeout"`
	// TransferTimeout bounds a batch whose context has no deadline
	// (Mooncake's MC_TRANSFER_TIMEOUT). Default 30s.
	TransferTimeout time.Duration `koanf:"transfer_timeout" json:"transfer_timeout"`
	// MaxHandshakeFrame bounds one handshake frame. Default 16 MiB.
	MaxHandshakeFrame int `koanf:"max_handshake_frame" json:"max_handshake_frame"`
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
	// Transports holds each transport's own options subtree
	// (transports.tcp.connections, ...), handed to it as JSON.
	Transports map[string]map[string]any `koanf:"transports" json:"transports,omitempty"`
}

// Defaults used for zero fields.
const (
	DefaultHostname          = "127.0.0.1"
	DefaultProtocol          = "tcp"
	DefaultConnectTimeout    = 10 * time.Second
	DefaultTransferTimeout   = 30 * time.Second
	DefaultMaxHandshakeFrame = 16 << 20
)

// Roles a node may take.
var Roles = []string{"kv_producer", "kv_consumer", "kv_both"}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.Hostname == "" {
		c.Hostname = DefaultHostname
	}
	if c.Protocol == "" {
		c.Protocol = DefaultProtocol
	}
	if c.Metadata == "" {
		c.Metadata = MetadataP2P
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = DefaultConnectTimeout
	}
	if c.TransferTimeout == 0 {
		c.TransferTimeout = DefaultTransferTimeout
	}
	if c.MaxHandshakeFrame == 0 {
		c.MaxHandshakeFrame = DefaultMaxHandshakeFrame
	}
	if c.Role == "" {
		c.Role = "kv_both"
	}
	if c.BufferDevice == "" {
		c.BufferDevice = "cpu"
	}
	return c
}

// Validate checks the config and names the first bad field.
func (c Config) Validate() error {
	bad := func(key string, v any, allowed string) error {
		return fmt.Errorf("config: %s = %v: %s: %w", key, v, allowed, plugins.ErrInvalidArgument)
	}
	if strings.ContainsAny(c.Hostname, " /") {
		return bad("hostname", fmt.Sprintf("%q", c.Hostname), "must be a host name or IP address")
	}
	if c.RPCPort < 0 || c.RPCPort > 65535 {
		return bad("rpc_port", c.RPCPort, "must be between 0 and 65535 (0 picks a free port)")
	}
	if c.Protocol != "" && !validName(c.Protocol) {
		return bad("protocol", fmt.Sprintf("%q", c.Protocol), "must be a transport name like tcp, rdma, ucx, efa, ascend")
	}
	if c.Metadata != "" && c.Metadata != MetadataP2P {
		return fmt.Errorf("config: metadata = %q: only %s is supported yet (etcd://, http:// and redis:// metadata services are planned): %w", c.Metadata, MetadataP2P, plugins.ErrNotSupported)
	}
	if c.ConnectTimeout < 0 {
		return bad("connect_timeout", c.ConnectTimeout, "must not be negative")
	}
	if c.TransferTimeout < 0 {
		return bad("transfer_timeout", c.TransferTimeout, "must not be negative")
	}
	if c.MaxHandshakeFrame < 0 || (c.MaxHandshakeFrame > 0 && c.MaxHandshakeFrame < 4096) {
		return bad("max_handshake_frame", c.MaxHandshakeFrame, "must be at least 4096 bytes")
	}
	for i, f := range c.Fallback {
		if !validName(f) {
			return bad(fmt.Sprintf("fallback[%d]", i), fmt.Sprintf("%q", f), "must be a transport name like tcp, ucx")
		}
	}
	if c.Role != "" && !contains(Roles, c.Role) {
		return bad("role", fmt.Sprintf("%q", c.Role), "must be one of "+strings.Join(Roles, ", "))
	}
	if c.LocalDeviceIndex < 0 {
		return bad("local_device_index", c.LocalDeviceIndex, "must not be negative")
	}
	switch c.BufferDevice {
	case "", "cpu":
	case "cuda", "npu", "xpu":
		return fmt.Errorf("config: buffer_device = %q: not supported yet; kvconnect allocates KV buffers in host (cpu) shared memory: %w", c.BufferDevice, plugins.ErrNotSupported)
	default:
		return bad("buffer_device", fmt.Sprintf("%q", c.BufferDevice), "must be cpu (cuda and npu are not supported yet)")
	}
	return nil
}

func validName(s string) bool {
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return false
		}
	}
	return s != ""
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
