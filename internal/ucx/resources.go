package ucx

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/kvconnect/kvconnect/errdefs"
)

// Library is the shared object Load opens.
const Library = "libucp.so.0"

// DebianPackage ships Library on Debian and Ubuntu.
const DebianPackage = "libucx0"

// LoadError says why UCX could not be loaded. It wraps
// errdefs.ErrUnavailable.
type LoadError struct {
	Library string // "libucp.so.0"
	Detail  string // dlerror() text, "built without cgo", a version problem
	Hints   []string
}

func (e *LoadError) Error() string {
	return fmt.Sprintf("cannot load UCX (%s, Debian package %s): %s", e.Library, DebianPackage, e.Detail)
}

// Unwrap returns errdefs.ErrUnavailable.
func (e *LoadError) Unwrap() error { return errdefs.ErrUnavailable }

func loadHints() []string {
	return []string{
		"install UCX: apt-get install " + DebianPackage + " (Debian/Ubuntu; the package that ships " + Library + "), or dnf install ucx (RHEL/Fedora)",
		"if UCX lives outside the loader's search path, add its lib directory to LD_LIBRARY_PATH",
		"or choose another transport (protocol: tcp), or keep tcp in the fallback list",
	}
}

// MinVersion is the oldest UCX release the binding accepts (the *_nbx API
// and ucp_worker_set_am_recv_handler are complete from 1.10).
var MinVersion = [2]int{1, 10}

// DeviceType is what a UCT resource's device is (uct_device_type_t).
type DeviceType int

// Device types, numbered as uct_device_type_t.
const (
	DeviceNet  DeviceType = 0 // network device (NIC, HCA port, netdev)
	DeviceShm  DeviceType = 1 // shared memory
	DeviceAcc  DeviceType = 2 // accelerator
	DeviceSelf DeviceType = 3 // loopback within a process
)

func (d DeviceType) String() string {
	switch d {
	case DeviceNet:
		return "net"
	case DeviceShm:
		return "shm"
	case DeviceAcc:
		return "acc"
	case DeviceSelf:
		return "self"
	}
	return fmt.Sprintf("DeviceType(%d)", int(d))
}

// Resource is one transport on one device: what UCX_TLS and
// UCX_NET_DEVICES select from.
type Resource struct {
	Component  string     // UCT component, e.g. "ib", "tcp", "posix" (empty when parsed from a context dump)
	MD         string     // memory domain, e.g. "mlx5_0", "tcp", "posix"
	Transport  string     // e.g. "rc_mlx5", "ud_verbs", "tcp", "posix", "cma"
	Device     string     // e.g. "mlx5_0:1", "eth0", "memory"
	DeviceType DeviceType // only from Available
}

func (r Resource) String() string { return r.Transport + "/" + r.Device }

// RDMATransports are the UCT transports that move data over an RDMA NIC
// (InfiniBand, RoCE): what the rdma transport requires a lane of.
var RDMATransports = []string{"rc", "rc_verbs", "rc_mlx5", "dc", "dc_mlx5", "ud", "ud_verbs", "ud_mlx5"}

// IsRDMA reports whether r's transport is one of RDMATransports.
func (r Resource) IsRDMA() bool { return slices.Contains(RDMATransports, r.Transport) }

// SharedMemoryTransports move data only between processes of one host.
var SharedMemoryTransports = []string{"posix", "sysv", "xpmem", "cma", "knem", "self"}

// IsSharedMemory reports whether r only reaches the same host.
func (r Resource) IsSharedMemory() bool { return slices.Contains(SharedMemoryTransports, r.Transport) }

// Lane is one lane of a connected endpoint, parsed from ucp_ep_print_info.
type Lane struct {
	Index     int
	Transport string // e.g. "tcp", "cma", "rc_mlx5"
	Device    string // e.g. "lo", "memory", "mlx5_0:1"
	Uses      []string
}

func (l Lane) String() string {
	return fmt.Sprintf("%s/%s(%s)", l.Transport, l.Device, strings.Join(l.Uses, ","))
}

// "#      resource 0  :  md 0  dev 0  flags -- tcp/lo"
var resourceLine = regexp.MustCompile(`^#\s*resource\s+\d+\s*:\s*md\s+(\d+)\s+dev\s+\d+\s+flags\s+\S+\s+([^/\s]+)/(\S+)\s*$`)

// "#            md 0  :  component 1  tcp "
var mdLine = regexp.MustCompile(`^#\s*md\s+(\d+)\s*:\s*component\s+\d+\s+(\S+)\s*$`)

// ParseContextInfo extracts the resources a context uses from the output of
// ucp_context_print_info. Lines it does not recognise are skipped.
func ParseContextInfo(text string) []Resource {
	mds := map[string]string{}
	var out []Resource
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimRight(line, " \r")
		if m := mdLine.FindStringSubmatch(line); m != nil {
			mds[m[1]] = m[2]
			continue
		}
		if m := resourceLine.FindStringSubmatch(line); m != nil {
			out = append(out, Resource{MD: mds[m[1]], Transport: m[2], Device: m[3]})
		}
	}
	return out
}

// "#                 lane[0]:  0:tcp/lo.0 md[0]    -> md[0]/tcp/sysdev[255] rma_bw#0 am am_bw#0"
var laneLine = regexp.MustCompile(`^#\s*lane\[(\d+)\]:\s*\d+:([^/\s]+)/(\S+?)\.\d+\s+md\[\d+\]\s*(.*)$`)

// ParseEndpointInfo extracts an endpoint's lanes from the output of
// ucp_ep_print_info.
func ParseEndpointInfo(text string) []Lane {
	var out []Lane
	for _, line := range strings.Split(text, "\n") {
		m := laneLine.FindStringSubmatch(strings.TrimRight(line, " \r"))
		if m == nil {
			continue
		}
		var idx int
		fmt.Sscan(m[1], &idx)
		l := Lane{Index: idx, Transport: m[2], Device: m[3]}
		rest := m[4]
		if i := strings.Index(rest, "->"); i >= 0 {
			f := strings.Fields(rest[i+2:])
			if len(f) > 0 {
				f = f[1:] // the remote md/transport/sysdev
			}
			l.Uses = f
		}
		out = append(out, l)
	}
	return out
}

// ParseConfigKeys extracts the variable names from UCX's configuration
// dump ("UCX_NAME=value" lines), without the UCX_ prefix.
func ParseConfigKeys(text string) map[string]bool {
	keys := map[string]bool{}
	for _, line := range strings.Split(text, "\n") {
		name, _, ok := strings.Cut(strings.TrimSpace(line), "=")
		if name, found := strings.CutPrefix(name, "UCX_"); ok && found && name != "" {
			keys[name] = true
		}
	}
	return keys
}
