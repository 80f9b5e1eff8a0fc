package rdma

import (
	"fmt"
	"strings"

	"github.com/kvconnect/kvconnect/internal/units"
	"github.com/kvconnect/kvconnect/plugins"
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
}

// Default option values.
const (
	DefaultSysfsRoot  = "/sys"
	DefaultDevRoot    = "/dev"
	DefaultMinMemlock = 64 << 20
)

// DefaultOptions are the options used for keys the config leaves out.
func DefaultOptions() Options {
	return Options{
		SysfsRoot:  DefaultSysfsRoot,
		DevRoot:    DefaultDevRoot,
		GIDIndex:   -1,
		IBPort:     1,
		MinMemlock: DefaultMinMemlock,
	}
}

func (o Options) validate() error {
	bad := func(key string, v any, allowed string) error {
		return fmt.Errorf("rdma: option transports.rdma.%s = %v: %s: %w", key, v, allowed, plugins.ErrInvalidArgument)
	}
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
