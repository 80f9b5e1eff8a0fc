package tcp

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/transports/tcp/internal/wire"
	"github.com/kvconnect/kvconnect/units"
)

// Options is the tcp transport's config subtree (transports.tcp).
type Options struct {
	// Connections is the number of TCP connections per peer; large ops are
	// striped across them.
	Connections int `json:"connections"`
	// ChunkSize splits ops larger than it into chunks.
	ChunkSize units.Size `json:"chunk_size"`
	// ConnectTimeout bounds dialing a peer.
	ConnectTimeout units.Duration `json:"connect_timeout"`
	// OpTimeout fails the ops on a connection that made no progress for
	// this long (a dead peer).
	OpTimeout units.Duration `json:"op_timeout"`
	// BindAddress is the address the data listener binds (Mooncake's
	// MC_TCP_BIND_ADDRESS); empty binds the node's bind_address (every
	// interface when that is empty too).
	BindAddress string `json:"bind_address"`
	// Port is the data listener's port; 0 picks a free one.
	Port int `json:"port"`
	// Mooncake serves unmodified Mooncake Transfer Engine peers on the
	// data port too (Mooncake's TCP data protocol, v1 and v2), beside
	// kvconnect's own framing. Default true.
	Mooncake bool `json:"mooncake"`
	// MooncakeLanes is the number of connections to a Mooncake peer; each
	// carries one request at a time, as Mooncake's server serves them.
	MooncakeLanes int `json:"mooncake_lanes"`
	// MooncakeProto is the Mooncake TCP protocol version spoken to Mooncake
	// peers: 0 (default) the version a peer advertises, 1 always v1 (as
	// Mooncake's MC_TCP_PROTO=1 does). v1 has no status: a WRITE the peer
	// rejects looks complete.
	MooncakeProto int `json:"mooncake_proto"`
	// MooncakeResetOnClose answers a Mooncake peer's close, once all this
	// side sent on the connection is acknowledged, with a reset instead of
	// a FIN, so neither side keeps the connection in TIME-WAIT: a Mooncake
	// initiator with its connection pool off (its default) opens and
	// closes a connection per request, and the TIME-WAIT sockets it would
	// be left with slow its every connect and exhaust its ports against a
	// target on another host. Default true; false closes with a FIN, as
	// Mooncake's own server does.
	MooncakeResetOnClose bool `json:"mooncake_reset_on_close"`
	// Prefault has the kernel read every page of a region when it is
	// registered (internal/prefault), so the region's first ops run at
	// full speed on virtual machines where the kernel's first access to a
	// page traps to the hypervisor. It spends at most half of the time
	// the registration was given. Default true; false leaves the cost to
	// each page's first op.
	Prefault bool `json:"prefault"`
}

// DefaultOptions are the options used for keys the config leaves out.
func DefaultOptions() Options {
	return Options{
		Connections:    4,
		ChunkSize:      units.Size(1 << 20),
		ConnectTimeout: units.Duration(5 * time.Second),
		OpTimeout:      units.Duration(30 * time.Second),
		Mooncake:       true,
		MooncakeLanes:  8,
		// A reset loses nothing here: the peer closed after its last
		// request, and it has acknowledged every byte of the answers.
		MooncakeResetOnClose: true,
		Prefault:             true,
	}
}

// ParseOptions reads a configuration's transports.tcp subtree (nil for
// none) as Init does: defaults for the keys it leaves out, every key
// known, every value of the right type and in range. The error wraps
// plugins.ErrInvalidArgument and names the key.
func ParseOptions(subtree map[string]any) (Options, error) {
	var raw []byte
	if subtree != nil {
		var err error
		if raw, err = json.Marshal(subtree); err != nil {
			return Options{}, fmt.Errorf("tcp: options (transports.tcp) cannot be encoded as JSON: %v: %w", err, plugins.ErrInvalidArgument)
		}
	}
	return decodeOptions(raw)
}

// decodeOptions decodes Init's options JSON over the defaults and checks
// them.
func decodeOptions(raw []byte) (Options, error) {
	opts := DefaultOptions()
	if err := plugins.DecodeOptions(Name, raw, &opts); err != nil {
		return Options{}, err
	}
	if err := opts.validate(); err != nil {
		return Options{}, err
	}
	return opts, nil
}

func (o Options) validate() error {
	bad := func(key string, v any, allowed string) error {
		return fmt.Errorf("tcp: option transports.tcp.%s = %v: %s: %w", key, v, allowed, plugins.ErrInvalidArgument)
	}
	switch {
	case o.Connections < 1 || o.Connections > 64:
		return bad("connections", o.Connections, "must be between 1 and 64")
	case o.ChunkSize < 4096 || o.ChunkSize > wire.MaxLength:
		return bad("chunk_size", units.FormatSize(uint64(o.ChunkSize)), "must be between 4KiB and 256MiB")
	case o.ConnectTimeout <= 0:
		return bad("connect_timeout", time.Duration(o.ConnectTimeout), "must be positive")
	case o.OpTimeout <= 0:
		return bad("op_timeout", time.Duration(o.OpTimeout), "must be positive")
	case o.Port < 0 || o.Port > 65535:
		return bad("port", o.Port, "must be between 0 and 65535")
	case o.MooncakeLanes < 1 || o.MooncakeLanes > 64:
		return bad("mooncake_lanes", o.MooncakeLanes, "must be between 1 and 64")
	case o.MooncakeProto != 0 && o.MooncakeProto != 1:
		return bad("mooncake_proto", o.MooncakeProto, "must be 0 (as the peer advertises) or 1 (always v1)")
	}
	return nil
}
