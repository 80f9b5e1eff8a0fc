package ucxpath

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	ucxlib "github.com/kvconnect/kvconnect/internal/ucx"
	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/units"
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
	// UCXConfig sets further UCX configuration variables for this
	// transport's context only (the process environment is not changed).
	// UCX 1.13 applies UCP variables under their name without the UCX_
	// prefix ({"RNDV_THRESH": "16k"}) and a transport's variables under
	// their name within the transport: TX_SEG_SIZE for
	// UCX_TCP_TX_SEG_SIZE, MM_SEG_SIZE for UCX_POSIX_SEG_SIZE and
	// UCX_SYSV_SEG_SIZE. Names UCX would ignore are errors. These add to
	// and override the bulk-transfer defaults (see bulkDefaults). Use tls
	// and net_devices for UCX_TLS and UCX_NET_DEVICES.
	UCXConfig map[string]string `json:"ucx_config"`
}

// bulkDefaults are the UCX settings this transport applies unless
// ucx_config overrides them, each when the lane list can select one of
// its transports (UCX warns about variables no transport reads). UCX 1.13
// moves RMA over its tcp and shared-memory (posix, sysv) lanes as
// active-message fragments of one segment each; the default segments
// (8 KiB) are sized for small messages, and KV blocks of hundreds of KiB
// move several times faster with larger ones (docs/UCX.md has the
// measurements). Shared-memory segments stay below 64 KiB: UCX 1.13's
// FIFO element stores the length in 16 bits, and larger segments corrupt
// memory (we saw the target crash at 64k and 128k, never at 32k).
var bulkDefaults = []struct {
	key, value string
	transports []string
}{
	{"TX_SEG_SIZE", "64k", []string{"tcp"}},
	{"RX_SEG_SIZE", "128k", []string{"tcp"}},
	{"MM_SEG_SIZE", "32k", []string{"sm", "shm", "mm", "posix", "sysv"}},
}

// maxMMSegSize bounds the shared-memory segment size (see bulkDefaults).
const maxMMSegSize = 64<<10 - 1

// tlsSelects reports whether the lane list tls may select one of names:
// always for UCX's default, "all" and lists that exclude ("^tcp").
func tlsSelects(tls string, names []string) bool {
	if tls == "" || tls == "all" || strings.HasPrefix(tls, "^") {
		return true
	}
	for _, t := range strings.Split(tls, ",") {
		if slices.Contains(names, t) {
			return true
		}
	}
	return false
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

// CheckOptions decodes a transport's options (transports.<name>, JSON)
// and checks their names, types and ranges, without loading UCX: the keys
// of ucx_config are checked by Init, which knows UCX's. Errors wrap
// ErrInvalidArgument and name the key.
func CheckOptions(name string, raw []byte) (Options, error) {
	opts := DefaultOptions()
	if err := plugins.DecodeOptions(name, raw, &opts); err != nil {
		return opts, err
	}
	opts.normalize()
	if err := opts.validate(name); err != nil {
		return opts, err
	}
	return opts, nil
}

func (o Options) validate(name string) error {
	bad := func(key string, v any, allowed string) error {
		return fmt.Errorf("%s: option transports.%s.%s = %v: %s: %w", name, name, key, v, allowed, plugins.ErrInvalidArgument)
	}
	listOK := func(s string) bool {
		for _, f := range strings.Split(s, ",") {
			f = strings.TrimPrefix(f, "^") // UCX's "all but" prefix
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
	for k, v := range o.UCXConfig {
		key := "ucx_config." + k
		switch {
		case k == "TLS" || k == "NET_DEVICES":
			return bad(key, fmt.Sprintf("%q", v), fmt.Sprintf("set transports.%s.%s instead", name, strings.ToLower(k)))
		case strings.HasPrefix(k, "UCX_"):
			return bad(key, fmt.Sprintf("%q", v), "name the variable without the UCX_ prefix: "+strings.TrimPrefix(k, "UCX_"))
		case k == "" || strings.Trim(k, "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") != "":
			return bad(key, fmt.Sprintf("%q", v), "variable names are upper case, like RNDV_THRESH")
		case v == "" || strings.ContainsAny(v, "\n\x00"):
			return bad(key, fmt.Sprintf("%q", v), "must be a non-empty single-line value")
		case k == "MM_SEG_SIZE":
			if n, err := units.ParseSize(v); err != nil || n > maxMMSegSize {
				return bad(key, fmt.Sprintf("%q", v), "must be a size below 64KiB (UCX 1.13 stores shared-memory fragment lengths in 16 bits)")
			}
		}
	}
	return nil
}

// checkUCXConfig rejects variable names the loaded UCX would not apply
// (UCX itself only warns about them): a UCP variable (ucp) by its name, or
// a transport's variable by its name within the transport (a suffix of an
// environment name, or MM_x for the shared-memory transports' x).
func (o Options) checkUCXConfig(name string, all, ucp map[string]bool) error {
	if all == nil {
		return nil
	}
	applies := func(k string) bool {
		if ucp[k] {
			return true
		}
		if rest, ok := strings.CutPrefix(k, "MM_"); ok && (all["POSIX_"+rest] || all["SYSV_"+rest]) {
			return true
		}
		for n := range all {
			if !ucp[n] && strings.HasSuffix(n, "_"+k) {
				return true
			}
		}
		return false
	}
	for _, k := range slices.Sorted(maps.Keys(o.UCXConfig)) {
		if applies(k) {
			continue
		}
		hint := "`ucx_info -c` lists UCX's variables"
		if all[k] {
			hint = "UCX 1.13 applies a transport's variable under its name within the transport: " +
				"TX_SEG_SIZE for UCX_TCP_TX_SEG_SIZE, MM_SEG_SIZE for UCX_POSIX_SEG_SIZE and UCX_SYSV_SEG_SIZE"
		} else {
			if best := plugins.Closest(k, slices.Sorted(maps.Keys(all))); best != "" {
				hint = fmt.Sprintf("did you mean %q? %s", best, hint)
			}
		}
		return fmt.Errorf("%s: option transports.%s.ucx_config.%s: UCX %s would not apply it; %s: %w",
			name, name, k, ucxlib.Version(), hint, plugins.ErrInvalidArgument)
	}
	return nil
}

// ucxConfig is the applicable bulkDefaults overridden by ucx_config,
// sorted by name.
func (o Options) ucxConfig(tls string) [][2]string {
	all := map[string]string{}
	for _, d := range bulkDefaults {
		if tlsSelects(tls, d.transports) {
			all[d.key] = d.value
		}
	}
	maps.Copy(all, o.UCXConfig)
	out := make([][2]string, 0, len(all))
	for _, k := range slices.Sorted(maps.Keys(all)) {
		out = append(out, [2]string{k, all[k]})
	}
	return out
}

// normalize drops blanks around list elements: "tcp, sm" is "tcp,sm".
func (o *Options) normalize() {
	clean := func(s string) string {
		f := strings.Split(s, ",")
		for i := range f {
			f[i] = strings.TrimSpace(f[i])
		}
		return strings.Join(f, ",")
	}
	o.TLS, o.NetDevices = clean(o.TLS), clean(o.NetDevices)
	o.ThreadMode, o.ErrorMode = strings.TrimSpace(o.ThreadMode), strings.TrimSpace(o.ErrorMode)
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
