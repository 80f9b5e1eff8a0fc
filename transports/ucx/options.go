package ucx

import (
	"fmt"
	"os"
	"strings"
	"time"

	ucxlib "github.com/kvconnect/kvconnect/internal/ucx"
	"github.com/kvconnect/kvconnect/internal/units"
	"github.com/kvconnect/kvconnect/plugins"
)

// Options is the ucx transport's config subtree (transports.ucx).
type Options struct {
	// TLS is the list of UCX transports ("lanes") this transport may use,
	// as UCX_TLS takes it: "tcp", "sm" (all shared-memory transports),
	// "posix,cma", "rc,ud", "all". Empty: the variant's default (for ucx,
	// UCX's own: $UCX_TLS, else all). It applies to this transport's UCX
	// context only; the process environment is not changed.
	TLS string `json:"tls"`
	// NetDevices is UCX_NET_DEVICES for this transport ("mlx5_0:1",
	// "eth0", "lo", "all"). Empty: derived from device_name (an RDMA device
	// name gets UCX's ":1" port suffix, "mlx5_0,mlx5_1" becomes
	// "mlx5_0:1,mlx5_1:1"; network interfaces and names with a port stay as
	// they are), else all devices.
	NetDevices string `json:"net_devices"`
	// ThreadMode is the UCX worker's thread mode: single (default: every
	// UCX call happens on the transport's one progress thread), serialized
	// or multi.
	ThreadMode string `json:"thread_mode"`
	// ErrorMode is UCX's endpoint error handling: "peer" (peer failures are
	// detected and in-flight ops fail; not offered by UCX 1.13's
	// shared-memory AM lanes), "none", or "auto" (default: peer where the
	// lanes allow it, else none).
	ErrorMode string `json:"error_mode"`
	// MaxInflight bounds the ops in flight at once (the rest queue).
	MaxInflight int `json:"max_inflight"`
	// OpTimeout fails the ops to a peer that made no progress for this
	// long, and bounds how long a peer may take to acknowledge a
	// deregistration.
	OpTimeout units.Duration `json:"op_timeout"`
	// ConnectTimeout bounds opening a peer (its hello/welcome round trip).
	ConnectTimeout units.Duration `json:"connect_timeout"`
}

// DefaultOptions are the options used for keys the config leaves out.
func DefaultOptions() Options {
	return Options{
		ThreadMode:     "single",
		ErrorMode:      "auto",
		MaxInflight:    256,
		OpTimeout:      units.Duration(30 * time.Second),
		ConnectTimeout: units.Duration(5 * time.Second),
	}
}

func (o Options) validate(name string) error {
	bad := func(key string, v any, allowed string) error {
		return fmt.Errorf("%s: option transports.%s.%s = %v: %s: %w", name, name, key, v, allowed, plugins.ErrInvalidArgument)
	}
	listOK := func(s string) bool {
		for _, f := range strings.Split(s, ",") {
			f = strings.TrimPrefix(strings.TrimSpace(f), "^")
			if f == "" || strings.ContainsAny(f, " \t\n\"'=") {
				return false
			}
		}
		return true
	}
	if _, ok := ucxlib.ParseThreadMode(o.ThreadMode); !ok {
		return bad("thread_mode", fmt.Sprintf("%q", o.ThreadMode), "must be single, serialized or multi")
	}
	switch {
	case o.TLS != "" && !listOK(o.TLS):
		return bad("tls", fmt.Sprintf("%q", o.TLS), `must be a comma-separated list of UCX transports like "tcp", "sm", "posix,cma" or "rc,ud"`)
	case o.NetDevices != "" && !listOK(o.NetDevices):
		return bad("net_devices", fmt.Sprintf("%q", o.NetDevices), `must be a comma-separated list of devices like "mlx5_0:1", "eth0" or "all"`)
	case o.ErrorMode != "auto" && o.ErrorMode != "peer" && o.ErrorMode != "none":
		return bad("error_mode", fmt.Sprintf("%q", o.ErrorMode), "must be auto, peer or none")
	case o.MaxInflight < 1 || o.MaxInflight > 65536:
		return bad("max_inflight", o.MaxInflight, "must be between 1 and 65536")
	case o.OpTimeout <= 0:
		return bad("op_timeout", time.Duration(o.OpTimeout), "must be positive")
	case o.ConnectTimeout <= 0:
		return bad("connect_timeout", time.Duration(o.ConnectTimeout), "must be positive")
	}
	return nil
}

// NetDevicesFromDeviceName maps Mooncake's device_name to UCX_NET_DEVICES:
// each RDMA device name ("mlx5_0") gets UCX's port suffix (":1"); names
// that already have a port, network interfaces known to this host (lo,
// eth0, ib0) and "all" are kept. Lists keep their order.
func NetDevicesFromDeviceName(deviceName string) string {
	var out []string
	for _, d := range strings.Split(deviceName, ",") {
		d = strings.TrimSpace(d)
		switch {
		case d == "":
			continue
		case d == "all" || strings.Contains(d, ":") || isNetInterface(d):
		default:
			d += ":1"
		}
		out = append(out, d)
	}
	return strings.Join(out, ",")
}

var isNetInterface = func(name string) bool {
	if strings.ContainsAny(name, "/.") {
		return false
	}
	_, err := os.Stat("/sys/class/net/" + name)
	return err == nil
}
