package rdma

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/transports/internal/ucxpath"
	"github.com/kvconnect/kvconnect/units"
)

// Options is the rdma transport's config subtree (transports.rdma).
type Options struct {
	// SysfsRoot is where sysfs is mounted; device state is read from
	// <SysfsRoot>/class/infiniband. Tests point it at fixture trees.
	SysfsRoot string `json:"sysfs_root"`
	// DevRoot is where /dev is; uverbs nodes are <DevRoot>/infiniband/uverbsN.
	DevRoot string `json:"dev_root"`
	// GIDIndex is the GID table index to use (Mooncake's MC_GID_INDEX);
	// -1 picks one: on RoCE a RoCE v2 GID, preferably IPv4-mapped; on
	// InfiniBand the first non-zero GID (index 0).
	GIDIndex int `json:"gid_index"`
	// IBPort is the device port to use (Mooncake's MC_IB_PORT), from 1.
	IBPort int `json:"ib_port"`
	// MinMemlock is the RLIMIT_MEMLOCK needed to register memory. An
	// unlimited limit, or CAP_IPC_LOCK, always passes; 0 disables the check.
	MinMemlock units.Size `json:"min_memlock"`

	// The data path: the ucx transport's options, applied to the rdma
	// transport's own UCX context (docs/UCX.md says what each does).

	// TLS is the UCX lane list, RDMA transports only: rc, ud, dc and their
	// verbs / mlx5 forms (rc_verbs, rc_mlx5, rc_v, rc_x, ud_verbs, ud_mlx5,
	// ud_v, ud_x, dc_mlx5, dc_x) or ib. Empty: "rc,ud" (ucxpath.RDMALanes);
	// add dc for DC on mlx5 ("rc,ud,dc").
	TLS string `json:"tls"`
	// NetDevices is UCX_NET_DEVICES ("mlx5_0:1"). Empty: derived from
	// device_name, each device on port ib_port ("mlx5_0,mlx5_1" with
	// ib_port 1 is "mlx5_0:1,mlx5_1:1"); with device_name empty too, every
	// device UCX finds.
	NetDevices string `json:"net_devices"`
	// ThreadMode, ErrorMode, MaxInflight, OpTimeout, ConnectTimeout and
	// UCXConfig are the ucx transport's thread_mode, error_mode,
	// max_inflight, op_timeout, connect_timeout and ucx_config, with its
	// defaults.
	ThreadMode     string            `json:"thread_mode"`
	ErrorMode      string            `json:"error_mode"`
	MaxInflight    int               `json:"max_inflight"`
	OpTimeout      units.Duration    `json:"op_timeout"`
	ConnectTimeout units.Duration    `json:"connect_timeout"`
	UCXConfig      map[string]string `json:"ucx_config"`

	// TestingUnsafeTCPLanes runs the rdma transport's data path over UCX's
	// tcp lanes instead of RDMA lanes, for tests on hosts without RDMA: the
	// preflight still runs but its verdict is ignored, the lanes are
	// "tcp" and no RDMA lane is required. It is refused unless the process
	// running the transport also has AllowTestingEnv=1 in its environment
	// (the two keys must come together; either alone is an error). Never
	// set it in production: nothing of it is RDMA.
	TestingUnsafeTCPLanes bool `json:"testing_unsafe_tcp_lanes"`
}

// TestingOption is the test-only option's key under transports.rdma.
const TestingOption = "testing_unsafe_tcp_lanes"

// AllowTestingEnv is the environment variable that must be "1" in the
// process running the transport for TestingOption to be accepted, and
// must not be set without it.
const AllowTestingEnv = "KVCONNECT_ALLOW_TESTING_OPTIONS"

// rdmaTLS are the names transports.rdma.tls accepts: UCX 1.13's RDMA
// transports and their aliases (ib = every verbs and mlx5 transport).
var rdmaTLS = []string{
	"rc", "rc_verbs", "rc_mlx5", "rc_v", "rc_x",
	"ud", "ud_verbs", "ud_mlx5", "ud_v", "ud_x",
	"dc", "dc_mlx5", "dc_x",
	"ib",
}

// Default option values.
const (
	DefaultSysfsRoot  = "/sys"
	DefaultDevRoot    = "/dev"
	DefaultMinMemlock = 64 << 20
)

// DefaultOptions are the options used for keys the config leaves out.
func DefaultOptions() Options {
	u := ucxpath.DefaultOptions()
	return Options{
		SysfsRoot:      DefaultSysfsRoot,
		DevRoot:        DefaultDevRoot,
		GIDIndex:       -1,
		IBPort:         1,
		MinMemlock:     DefaultMinMemlock,
		ThreadMode:     u.ThreadMode,
		ErrorMode:      u.ErrorMode,
		MaxInflight:    u.MaxInflight,
		OpTimeout:      u.OpTimeout,
		ConnectTimeout: u.ConnectTimeout,
	}
}

// validate checks the preflight's options; the data path's are checked
// by configure (lanes, the test-only option) and the ucx transport.
func (o Options) validate() error {
	bad := badOption
	switch {
	case o.SysfsRoot == "":
		return bad("sysfs_root", `""`, "must name the sysfs mount point, normally /sys")
	case o.DevRoot == "":
		return bad("dev_root", `""`, "must name the device directory, normally /dev")
	case o.GIDIndex < -1 || o.GIDIndex > 255:
		return bad("gid_index", o.GIDIndex, "must be -1 (auto) or a GID table index from 0 to 255")
	case o.IBPort < 1 || o.IBPort > 255:
		return bad("ib_port", o.IBPort, "must be a port number from 1 to 255")
	}
	return nil
}

// parseDeviceNames splits device_name: "" means every device, otherwise a
// comma-separated list of RDMA device names ("mlx5_0,mlx5_1"). Spaces
// around names and empty items are dropped; duplicates are removed.
func parseDeviceNames(s string) ([]string, error) {
	t := strings.TrimSpace(s)
	if strings.HasPrefix(t, "{") || strings.HasSuffix(strings.ToLower(t), ".json") {
		return nil, fmt.Errorf("rdma: device_name %q is a per-device map (SGLang style); it must be resolved to this worker's devices (local_device_index) before the transport starts: %w",
			s, plugins.ErrInvalidArgument)
	}
	var out []string
	seen := map[string]bool{}
	for _, f := range strings.Split(t, ",") {
		f = strings.TrimSpace(f)
		if f == "" || seen[f] {
			continue
		}
		if strings.ContainsAny(f, "/ \t\n\x00") || f == "." || f == ".." {
			return nil, fmt.Errorf("rdma: device_name %q: %q is not an RDMA device name (names look like mlx5_0): %w", s, f, plugins.ErrInvalidArgument)
		}
		seen[f] = true
		out = append(out, f)
	}
	return out, nil
}

func badOption(key string, v any, allowed string) error {
	return fmt.Errorf("rdma: option transports.rdma.%s = %v: %s: %w", key, v, allowed, plugins.ErrInvalidArgument)
}

// checkTesting enforces the two keys of the test-only option: the option
// set to true and AllowTestingEnv=1 (lookup reads the environment). Either
// without the other is an error, and so is the variable with another
// value. It reports whether the test-only lanes are on.
func (o Options) checkTesting(lookup func(string) (string, bool)) (bool, error) {
	v, set := lookup(AllowTestingEnv)
	switch {
	case !o.TestingUnsafeTCPLanes && !set:
		return false, nil
	case !o.TestingUnsafeTCPLanes:
		return false, fmt.Errorf("rdma: %s=%q is set in the environment but transports.rdma.%s is not true: "+
			"the variable only unlocks that test-only option and must not be set otherwise (unset it): %w",
			AllowTestingEnv, v, TestingOption, plugins.ErrInvalidArgument)
	case !set:
		return false, badOption(TestingOption, true, fmt.Sprintf("is a test-only option (it runs the rdma transport over UCX's tcp lanes, not RDMA) "+
			"and is refused unless %s=1 is also set in the environment of the process running the transport; never use it in production", AllowTestingEnv))
	case v != "1":
		return false, fmt.Errorf("rdma: %s=%q: must be exactly 1 to allow transports.rdma.%s: %w",
			AllowTestingEnv, v, TestingOption, plugins.ErrInvalidArgument)
	}
	return true, nil
}

// lanes returns the UCX lane list: tls when set (RDMA transports only),
// else ucxpath.RDMALanes; with the test-only option, "tcp".
func (o Options) lanes(testing bool) (string, error) {
	tls := strings.TrimSpace(o.TLS)
	if testing {
		if tls != "" {
			return "", badOption("tls", fmt.Sprintf("%q", o.TLS), "cannot be combined with transports.rdma."+TestingOption+", which uses UCX's tcp lanes; leave tls unset")
		}
		return "tcp", nil
	}
	if tls == "" {
		return ucxpath.RDMALanes, nil
	}
	var out []string
	for _, f := range strings.Split(tls, ",") {
		f = strings.TrimSpace(f)
		name := strings.TrimSuffix(f, ":aux")
		if !slices.Contains(rdmaTLS, name) {
			return "", badOption("tls", fmt.Sprintf("%q", o.TLS), fmt.Sprintf("%q is not an RDMA transport: the rdma transport uses RDMA lanes only (%s); "+
				"use protocol ucx for tcp or shared-memory lanes", f, strings.Join(rdmaTLS, ", ")))
		}
		out = append(out, f)
	}
	return strings.Join(out, ","), nil
}

// devicePorts splits device_name into the RDMA device names the preflight
// checks and UCX's net devices: every name gets ":<ib_port>" unless it
// already has a port ("mlx5_0,mlx5_1:1" with ib_port 1 is
// "mlx5_0:1,mlx5_1:1"). A port in device_name must be ib_port, the port
// the preflight checks. "" stays "" (every device).
func devicePorts(deviceName string, ibPort int) (devices []string, netDevices string, err error) {
	names, err := parseDeviceNames(deviceName)
	if err != nil {
		return nil, "", err
	}
	var nets []string
	for _, n := range names {
		dev, port, hasPort := strings.Cut(n, ":")
		if hasPort {
			p, perr := strconv.Atoi(port)
			switch {
			case dev == "" || perr != nil || p < 1 || p > 255:
				return nil, "", fmt.Errorf("rdma: device_name %q: %q is not an RDMA device with a port (names look like mlx5_0 or mlx5_0:1): %w",
					deviceName, n, plugins.ErrInvalidArgument)
			case p != ibPort:
				return nil, "", fmt.Errorf("rdma: device_name %q names port %d of %s but transports.rdma.ib_port (MC_IB_PORT) is %d, the port the preflight checks: "+
					"set ib_port to %d or drop the port from device_name: %w", deviceName, p, dev, ibPort, p, plugins.ErrInvalidArgument)
			}
		}
		net := fmt.Sprintf("%s:%d", dev, ibPort)
		if slices.Contains(nets, net) {
			continue
		}
		devices = append(devices, dev)
		nets = append(nets, net)
	}
	return devices, strings.Join(nets, ","), nil
}

// NetDevices maps device_name to UCX_NET_DEVICES for the rdma transport:
// each RDMA device gets ":<ibPort>" unless it already has a port, and
// comma lists keep their order ("mlx5_0,mlx5_1" -> "mlx5_0:1,mlx5_1:1").
func NetDevices(deviceName string, ibPort int) (string, error) {
	_, nets, err := devicePorts(deviceName, ibPort)
	return nets, err
}

// ucxOptions is the options JSON for the UCX variant: the ucx keys of o,
// with the lanes, net devices and UCX settings the rdma transport chose.
func (o Options) ucxOptions(tls, netDevices string, testing bool) ucxpath.Options {
	u := ucxpath.Options{
		TLS:            tls,
		NetDevices:     netDevices,
		ThreadMode:     o.ThreadMode,
		ErrorMode:      o.ErrorMode,
		MaxInflight:    o.MaxInflight,
		OpTimeout:      o.OpTimeout,
		ConnectTimeout: o.ConnectTimeout,
	}
	if len(o.UCXConfig) > 0 || (!testing && o.GIDIndex >= 0) {
		u.UCXConfig = maps.Clone(o.UCXConfig)
		if u.UCXConfig == nil {
			u.UCXConfig = map[string]string{}
		}
	}
	// An explicit gid_index (MC_GID_INDEX) is UCX_IB_GID_INDEX too, unless
	// ucx_config sets it; "auto" leaves the choice to UCX.
	if _, set := u.UCXConfig[ucxGIDIndex]; !testing && o.GIDIndex >= 0 && !set {
		u.UCXConfig[ucxGIDIndex] = strconv.Itoa(o.GIDIndex)
	}
	return u
}

// ucxGIDIndex is UCX_IB_GID_INDEX as ucp_config_modify takes it (a
// transport's variable under its name within the transport).
const ucxGIDIndex = "GID_INDEX"

func lookupEnv(name string) (string, bool) {
	v, ok := os.LookupEnv(name)
	return v, ok && v != ""
}
