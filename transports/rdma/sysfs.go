package rdma

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/kvconnect/kvconnect/plugins"
)

// Port states as the kernel prints them in ports/<n>/state ("4: ACTIVE").
const (
	PortNOP         = 0
	PortDown        = 1
	PortInit        = 2
	PortArmed       = 3
	PortActive      = 4
	PortActiveDefer = 5
)

// Physical port states as printed in ports/<n>/phys_state ("5: LinkUp").
const (
	PhysSleep    = 1
	PhysPolling  = 2
	PhysDisabled = 3
	PhysTraining = 4
	PhysLinkUp   = 5
	PhysErrorRec = 6
	PhysPhyTest  = 7
)

// Link layers as printed in ports/<n>/link_layer.
const (
	LinkInfiniBand = "InfiniBand"
	LinkEthernet   = "Ethernet"
)

// GID types as printed in ports/<n>/gid_attrs/types/<i>.
const (
	GIDTypeIBRoCEv1 = "IB/RoCE v1"
	GIDTypeRoCEv2   = "RoCE v2"
)

// maxAttrSize bounds what is read from one sysfs attribute (the kernel
// never prints more than a page).
const maxAttrSize = 4096

// maxGIDTable bounds the GID entries looked at per port (real tables hold
// at most 256).
const maxGIDTable = 1024

// State is a numbered state read from sysfs, e.g. "4: ACTIVE".
type State struct {
	Code int
	Name string
}

func (s State) String() string {
	if s.Name == "" && s.Code == 0 {
		return "unknown"
	}
	return fmt.Sprintf("%d: %s", s.Code, s.Name)
}

// parseState parses a state attribute: "<code>: <NAME>" with a trailing
// newline. It never panics; anything else is an error quoting the value.
func parseState(raw string) (State, error) {
	s := strings.TrimSpace(raw)
	codeStr, name, ok := strings.Cut(s, ":")
	if !ok {
		return State{}, fmt.Errorf("%q is not \"<number>: <name>\"", s)
	}
	codeStr = strings.TrimSpace(codeStr)
	code, err := strconv.ParseUint(codeStr, 10, 8)
	if err != nil {
		return State{}, fmt.Errorf("%q: %q is not a state number", s, codeStr)
	}
	name = strings.TrimSpace(name)
	if name == "" {
		return State{}, fmt.Errorf("%q has no state name", s)
	}
	return State{Code: int(code), Name: name}, nil
}

// GID is one non-zero entry of a port's GID table.
type GID struct {
	Index int
	// Addr is the GID as an IPv6 address (RoCE GIDs are the netdev's IPv6
	// addresses and IPv4-mapped IPv4 addresses).
	Addr netip.Addr
	// Type is "IB/RoCE v1", "RoCE v2", or "" when gid_attrs/types could
	// not be read (older kernels, or entries the kernel refuses to show).
	Type string
	// NetDev is the network interface a RoCE GID belongs to ("" on IB).
	NetDev string
}

func (g GID) String() string {
	s := fmt.Sprintf("%d %s", g.Index, g.Addr)
	if g.Type != "" {
		s += " " + g.Type
	}
	if g.NetDev != "" {
		s += " " + g.NetDev
	}
	return s
}

// IPv4 reports whether the GID is an IPv4-mapped address.
func (g GID) IPv4() bool { return g.Addr.Is4In6() }

// parseGID parses a GID as the kernel prints it: eight groups of one to
// four hex digits separated by colons ("fe80:0000:...:3c4d"). The zero
// GID parses (callers check IsUnspecified).
func parseGID(raw string) (netip.Addr, error) {
	s := strings.TrimSpace(raw)
	groups := strings.Split(s, ":")
	if len(groups) != 8 {
		return netip.Addr{}, fmt.Errorf("%q is not a GID (want 8 colon-separated groups of hex digits)", s)
	}
	var b [16]byte
	for i, g := range groups {
		if len(g) == 0 || len(g) > 4 {
			return netip.Addr{}, fmt.Errorf("%q is not a GID: group %d is %q", s, i+1, g)
		}
		v, err := strconv.ParseUint(g, 16, 16)
		if err != nil {
			return netip.Addr{}, fmt.Errorf("%q is not a GID: group %d is %q", s, i+1, g)
		}
		b[2*i] = byte(v >> 8)
		b[2*i+1] = byte(v)
	}
	return netip.AddrFrom16(b), nil
}

// parseGIDType normalises a gid_attrs/types entry: the kernel's names are
// returned as constants, anything else trimmed as it is.
func parseGIDType(raw string) string {
	s := strings.TrimSpace(raw)
	switch strings.ToLower(s) {
	case "ib/roce v1":
		return GIDTypeIBRoCEv1
	case "roce v2":
		return GIDTypeRoCEv2
	}
	if len(s) > 64 {
		s = s[:64]
	}
	return s
}

// Port is one port of a device as sysfs shows it.
type Port struct {
	Num       int
	Path      string // <device>/ports/<n>
	State     State  // "4: ACTIVE"
	PhysState State  // "5: LinkUp"
	LinkLayer string // "InfiniBand", "Ethernet", "Unknown" (EFA)
	LID       string // "0x1a"; 0 on Ethernet
	SMLID     string
	Rate      string // "200 Gb/sec (4X HDR)"
	// GIDTableLen is how many entries ports/<n>/gids holds.
	GIDTableLen int
	// GIDs are the entries that are set (non-zero), by index.
	GIDs []GID
	// Errors lists attributes that could not be read or parsed.
	Errors []string
}

// Active reports whether the port is ACTIVE.
func (p *Port) Active() bool { return p.State.Code == PortActive }

// Device is an RDMA device as sysfs (and libibverbs) shows it.
type Device struct {
	Name      string
	Path      string // <sysfs>/class/infiniband/<name>
	NodeType  string // "1: CA", "7: unspecified" (EFA)
	NodeGUID  string
	FWVersion string
	HCAType   string // "MT4123" (ConnectX-6)
	BoardID   string
	Driver    string   // kernel driver of the PCI function: mlx5_core, efa, ...
	NetDevs   []string // network interfaces of the same PCI function
	// EFA is true for AWS Elastic Fabric Adapters, which verbs lists but
	// the rdma transport's queue pairs do not run on.
	EFA bool
	// InSysfs is false for a device libibverbs listed but sysfs lacks.
	InSysfs bool
	// Listed is true when ibv_get_device_list returned the device.
	Listed bool
	// Uverbs is the user-verbs device, "uverbs0"; "" when sysfs has none.
	Uverbs string
	// UverbsPath is <dev_root>/infiniband/<Uverbs>.
	UverbsPath string
	// UverbsErr is why UverbsPath cannot be opened read-write; nil when it can.
	UverbsErr error
	// UverbsCharDev reports whether UverbsPath is a character device (test
	// fixtures use regular files).
	UverbsCharDev bool
	Ports         []Port
	// Errors lists attributes that could not be read.
	Errors []string
	// Port, GIDIndex and GID are what the preflight chose on this device
	// (Port 0 / GIDIndex -1 when it did not get that far).
	Port     int
	GIDIndex int
	GID      GID
	// Problem says why the device is not usable ("" when it is, or when
	// it was not checked).
	Problem string
	check   Check
	diag    *plugins.InitError
}

// port returns the device's port n, or nil.
func (d *Device) port(n int) *Port {
	for i := range d.Ports {
		if d.Ports[i].Num == n {
			return &d.Ports[i]
		}
	}
	return nil
}

// readAttr reads one sysfs attribute and trims surrounding white space.
func readAttr(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxAttrSize))
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// listDevices returns the names under <root>/class/infiniband, sorted.
// A missing directory means no devices (nil, nil).
func listDevices(sysfsRoot string) ([]string, error) {
	dir := filepath.Join(sysfsRoot, "class", "infiniband")
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		out = append(out, e.Name())
	}
	sort.Strings(out)
	return out, nil
}

// numericEntries returns the names of dir's entries that are decimal
// numbers, sorted numerically, at most limit of them.
func numericEntries(dir string, limit int) ([]int, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []int
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil || n < 0 || strconv.Itoa(n) != e.Name() {
			continue
		}
		out = append(out, n)
	}
	sort.Ints(out)
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// readDevice reads what sysfs says about device name. Unreadable or odd
// attributes are recorded in Errors, never fatal: the checks decide what
// matters.
func readDevice(sysfsRoot, devRoot, name string) Device {
	d := Device{Name: name, Path: filepath.Join(sysfsRoot, "class", "infiniband", name), GIDIndex: -1}
	if _, err := os.Stat(d.Path); err != nil {
		d.Errors = append(d.Errors, err.Error())
		return d
	}
	d.InSysfs = true
	opt := func(attr string) string {
		v, err := readAttr(filepath.Join(d.Path, attr))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			d.Errors = append(d.Errors, err.Error())
		}
		return v
	}
	d.NodeType = opt("node_type")
	d.NodeGUID = opt("node_guid")
	d.FWVersion = opt("fw_ver")
	d.HCAType = opt("hca_type")
	d.BoardID = opt("board_id")
	if link, err := os.Readlink(filepath.Join(d.Path, "device", "driver")); err == nil {
		d.Driver = filepath.Base(link)
	}
	if ents, err := os.ReadDir(filepath.Join(d.Path, "device", "net")); err == nil {
		for _, e := range ents {
			if !strings.HasPrefix(e.Name(), ".") {
				d.NetDevs = append(d.NetDevs, e.Name())
			}
		}
	}
	d.EFA = d.Driver == "efa" || strings.HasPrefix(name, "efa")
	d.Uverbs = findUverbs(sysfsRoot, d.Path, name)
	if d.Uverbs != "" {
		d.UverbsPath = filepath.Join(devRoot, "infiniband", d.Uverbs)
		d.UverbsCharDev, d.UverbsErr = checkNode(d.UverbsPath)
	}
	ports, err := numericEntries(filepath.Join(d.Path, "ports"), 256)
	if err != nil {
		d.Errors = append(d.Errors, err.Error())
	}
	for _, n := range ports {
		if n == 0 {
			continue
		}
		d.Ports = append(d.Ports, readPort(filepath.Join(d.Path, "ports", strconv.Itoa(n)), n))
	}
	return d
}

// findUverbs finds the uverbs device of an RDMA device: first in the PCI
// function's infiniband_verbs directory, then by scanning
// class/infiniband_verbs/uverbs*/ibdev.
func findUverbs(sysfsRoot, devPath, name string) string {
	if ents, err := os.ReadDir(filepath.Join(devPath, "device", "infiniband_verbs")); err == nil {
		for _, e := range ents {
			if !strings.HasPrefix(e.Name(), "uverbs") {
				continue
			}
			// A PCI function with several RDMA devices lists them all:
			// take the one whose ibdev names this device, or the only one.
			ib, err := readAttr(filepath.Join(devPath, "device", "infiniband_verbs", e.Name(), "ibdev"))
			if err != nil || ib == name {
				return e.Name()
			}
		}
	}
	class := filepath.Join(sysfsRoot, "class", "infiniband_verbs")
	ents, err := os.ReadDir(class)
	if err != nil {
		return ""
	}
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), "uverbs") {
			continue
		}
		if ib, err := readAttr(filepath.Join(class, e.Name(), "ibdev")); err == nil && ib == name {
			return e.Name()
		}
	}
	return ""
}

// checkNode reports whether path can be opened read-write as a device
// node: it must exist, must not be a directory, and access(R_OK|W_OK)
// must pass. Tests run as root, which passes access() on any existing
// file, so fixtures exercise the failures with a missing node (ENOENT), a
// parent that is a file (ENOTDIR) and a node that is a directory (EISDIR).
func checkNode(path string) (charDev bool, err error) {
	fi, err := os.Stat(path)
	if err != nil {
		return false, err
	}
	if fi.IsDir() {
		return false, &os.PathError{Op: "open", Path: path, Err: syscall.EISDIR}
	}
	if err := accessRW(path); err != nil {
		return false, &os.PathError{Op: "access", Path: path, Err: err}
	}
	return fi.Mode()&os.ModeCharDevice != 0, nil
}

// readPort reads one port directory.
func readPort(dir string, num int) Port {
	p := Port{Num: num, Path: dir}
	note := func(err error) { p.Errors = append(p.Errors, err.Error()) }
	state := func(attr string) State {
		v, err := readAttr(filepath.Join(dir, attr))
		if err != nil {
			note(err)
			return State{}
		}
		s, err := parseState(v)
		if err != nil {
			note(fmt.Errorf("%s: %w", filepath.Join(dir, attr), err))
		}
		return s
	}
	p.State = state("state")
	p.PhysState = state("phys_state")
	str := func(attr string) string {
		v, err := readAttr(filepath.Join(dir, attr))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			note(err)
		}
		return v
	}
	p.LinkLayer = str("link_layer")
	p.LID = str("lid")
	p.SMLID = str("sm_lid")
	p.Rate = str("rate")
	idx, err := numericEntries(filepath.Join(dir, "gids"), maxGIDTable)
	if err != nil {
		note(err)
	}
	if len(idx) > 0 {
		p.GIDTableLen = idx[len(idx)-1] + 1
	}
	for _, i := range idx {
		is := strconv.Itoa(i)
		v, err := readAttr(filepath.Join(dir, "gids", is))
		if err != nil {
			note(err)
			continue
		}
		a, err := parseGID(v)
		if err != nil {
			note(fmt.Errorf("%s: %w", filepath.Join(dir, "gids", is), err))
			continue
		}
		if a.IsUnspecified() {
			continue
		}
		g := GID{Index: i, Addr: a}
		// The kernel refuses (EINVAL) to show attributes of empty entries
		// and some kernels lack gid_attrs: both leave Type empty.
		if t, err := readAttr(filepath.Join(dir, "gid_attrs", "types", is)); err == nil {
			g.Type = parseGIDType(t)
		}
		if nd, err := readAttr(filepath.Join(dir, "gid_attrs", "ndevs", is)); err == nil && len(nd) <= 64 {
			g.NetDev = nd
		}
		p.GIDs = append(p.GIDs, g)
	}
	return p
}

// gidAt returns the port's set GID at index i.
func (p *Port) gidAt(i int) (GID, bool) {
	for _, g := range p.GIDs {
		if g.Index == i {
			return g, true
		}
	}
	return GID{}, false
}

// pickGID chooses the GID to use. want >= 0 is an explicit index; -1
// picks: on Ethernet (RoCE) a RoCE v2 IPv4-mapped GID, else any RoCE v2
// GID, else the first set one; elsewhere the first set one.
func (p *Port) pickGID(want int) (GID, bool) {
	if want >= 0 {
		return p.gidAt(want)
	}
	if len(p.GIDs) == 0 {
		return GID{}, false
	}
	if p.LinkLayer == LinkEthernet {
		for _, g := range p.GIDs {
			if g.Type == GIDTypeRoCEv2 && g.IPv4() {
				return g, true
			}
		}
		for _, g := range p.GIDs {
			if g.Type == GIDTypeRoCEv2 {
				return g, true
			}
		}
	}
	return p.GIDs[0], true
}
