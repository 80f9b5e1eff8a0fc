package rdma

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"github.com/kvconnect/kvconnect/plugins"
)

// Hints shared by several diagnoses.
const (
	hintFallback     = "to run without RDMA here, set protocol tcp (MC_FORCE_TCP=1); otherwise the fallback list (default for rdma: tcp) takes over, unless fallback is [] (strict mode)"
	hintContainerRun = "in a container: the host must have the RDMA modules loaded, and the container needs the device nodes and locked memory: docker run --device /dev/infiniband --cap-add IPC_LOCK --ulimit memlock=-1 (Kubernetes: request an RDMA resource from an RDMA device plugin such as k8s-rdma-shared-dev-plugin or the NVIDIA Network Operator, and add capability IPC_LOCK)"
	hintDoctor       = "kvconnect doctor prints every RDMA device with its ports, GIDs and device nodes"
	hintProviders    = "install the verbs provider for the NIC's driver: Debian/Ubuntu apt-get install ibverbs-providers (libmlx5 and others), RHEL/Rocky dnf install rdma-core (or libibverbs with its providers), or MLNX_OFED/DOCA-OFED; inside a container image install them in the image"
	hintSelectDevice = "name the devices to use with device_name (MOONCAKE_DEVICE, --disaggregation-ib-device, kv_connector_extra_config.device_name), e.g. %s, or leave it empty to use every usable device"
)

func newDiag(step, cause string, hints ...string) *plugins.InitError {
	return &plugins.InitError{Transport: Name, Step: step, Cause: cause, Hints: hints, Err: plugins.ErrUnavailable}
}

func joinNames(names []string) string { return strings.Join(names, ", ") }

// trimPrefix drops the "rdma: " prefix of this package's errors, which an
// InitError prints itself.
func trimPrefix(s string) string { return strings.TrimPrefix(s, Name+": ") }

func sysfsClass(r *Report, class string) string {
	return filepath.Join(r.Options.SysfsRoot, "class", class)
}

// diagLibrary: libibverbs cannot be loaded, or this build cannot load
// libraries at all.
func diagLibrary(r *Report) *plugins.InitError {
	lib := r.Library
	if lib.Unsupported != "" {
		return newDiag(plugins.StepLoadLibrary, lib.Unsupported,
			"build the rdma plugin on Linux with cgo enabled (CGO_ENABLED=1 and a C compiler); libibverbs is loaded at run time, so its headers are not needed to build",
			hintFallback)
	}
	return newDiag(plugins.StepLoadLibrary,
		fmt.Sprintf("cannot load %s, the RDMA verbs library: %s (is libibverbs installed?)", lib.Soname, lib.LoadError),
		"install libibverbs and the providers: Debian/Ubuntu apt-get install libibverbs1 ibverbs-providers, RHEL/Rocky dnf install rdma-core libibverbs, or MLNX_OFED/DOCA-OFED; inside a container image install them in the image, the host's libraries are not visible there",
		"if it is installed in a non-standard place, add that directory to LD_LIBRARY_PATH or ldconfig",
		hintFallback)
}

// diagDeviceList: ibv_get_device_list returned NULL.
func diagDeviceList(r *Report) *plugins.InitError {
	e := r.Library.ListErrno
	name := errnoName(e)
	if name == "" {
		name = "errno " + fmt.Sprint(int(e))
	}
	class, verbs := sysfsClass(r, "infiniband"), sysfsClass(r, "infiniband_verbs")
	var ie *plugins.InitError
	switch {
	case e == syscall.ENOSYS && r.UverbsABI == "" && len(r.SysfsDevices) == 0:
		ie = newDiag(plugins.StepProbeDevices,
			fmt.Sprintf("ibv_get_device_list failed with ENOSYS (%s): this kernel has no RDMA support loaded: neither %s nor %s exists, so there is no RDMA NIC driver and no ib_uverbs (or sysfs is hidden from this container)",
				e, class, verbs),
			"on a host with an RDMA NIC, load its driver and the user-verbs modules: modprobe mlx5_ib ib_uverbs rdma_ucm (with MLNX_OFED/DOCA-OFED: /etc/init.d/openibd restart); lspci | grep -i -e mellanox -e infiniband shows whether there is a NIC at all",
			"in a VM or sandbox (Firecracker, gVisor, a cloud VM without SR-IOV RDMA) there is no RDMA unless a virtual function is passed through",
			hintContainerRun,
			hintFallback)
	case e == syscall.ENOSYS && r.UverbsABI == "":
		ie = newDiag(plugins.StepProbeDevices,
			fmt.Sprintf("ibv_get_device_list failed with ENOSYS (%s): the kernel has RDMA devices (%s in %s) but no user-verbs support: %s is missing, so the ib_uverbs module is not loaded",
				e, joinNames(r.SysfsDevices), class, verbs),
			"load it: modprobe ib_uverbs (and rdma_ucm); with MLNX_OFED/DOCA-OFED: /etc/init.d/openibd restart; to load it at boot add ib_uverbs to /etc/modules-load.d/rdma.conf",
			hintContainerRun,
			hintFallback)
	case e == syscall.ENOSYS:
		ie = newDiag(plugins.StepProbeDevices,
			fmt.Sprintf("ibv_get_device_list failed with ENOSYS (%s): libibverbs does not accept the kernel's user-verbs interface (%s/abi_version = %q): the rdma-core userspace and the kernel's RDMA stack do not match",
				e, verbs, r.UverbsABI),
			"use the rdma-core (libibverbs) that matches the running kernel's RDMA stack: the distribution's packages for an inbox driver, or the MLNX_OFED/DOCA-OFED userspace for its kernel modules, not a mix",
			hintFallback)
	case e == syscall.EPERM || e == syscall.EACCES:
		ie = newDiag(plugins.StepProbeDevices,
			fmt.Sprintf("ibv_get_device_list failed with %s (%s): the process may not enumerate RDMA devices (RDMA netlink or %s refused)", name, e, verbs),
			"a seccomp or AppArmor/SELinux policy, or an unprivileged container, can refuse it; run the container with the RDMA device nodes and IPC_LOCK, or relax the policy for the serving process",
			hintContainerRun,
			hintFallback)
	default:
		ie = newDiag(plugins.StepProbeDevices,
			fmt.Sprintf("ibv_get_device_list failed with %s (%s)", name, e),
			"ibv_devices (from ibverbs-utils / rdma-core) runs the same call and may print more; check dmesg for errors of the RDMA drivers",
			hintFallback)
	}
	ie.NativeCode, ie.NativeName = int64(e), errnoName(e)
	return ie
}

// diagNoDevices: libibverbs answered with an empty list. sysfs tells why.
func diagNoDevices(r *Report) *plugins.InitError {
	if len(r.Devices) == 0 {
		cause := fmt.Sprintf("libibverbs found no RDMA devices and %s lists none", sysfsClass(r, "infiniband"))
		if r.UverbsABI != "" {
			cause += " (ib_uverbs is loaded, but no RDMA NIC driver registered a device)"
		}
		return newDiag(plugins.StepProbeDevices, cause,
			"check the host has an RDMA NIC (lspci | grep -i -e mellanox -e infiniband -e broadcom) and its RDMA driver is loaded (mlx5_ib for ConnectX, bnxt_re, irdma, erdma); ibv_devices lists what libibverbs sees",
			"in a VM, the RDMA NIC or an SR-IOV virtual function must be passed through",
			hintFallback)
	}
	var missing, noUverbs, present []string
	for _, d := range r.Devices {
		switch {
		case d.Uverbs == "":
			noUverbs = append(noUverbs, d.Name)
		case d.UverbsErr != nil && errors.Is(d.UverbsErr, os.ErrNotExist):
			missing = append(missing, fmt.Sprintf("%s (%s)", d.Name, d.UverbsPath))
		default:
			present = append(present, d.Name)
		}
	}
	switch {
	case len(missing) > 0:
		return newDiag(plugins.StepProbeDevices,
			fmt.Sprintf("libibverbs found no RDMA devices: sysfs has %s but their device nodes do not exist: %s: /dev/infiniband is not mounted into this container (or udev did not create the nodes)",
				joinNames(r.SysfsDevices), joinNames(missing)),
			hintContainerRun,
			"on a bare host: ls -l /dev/infiniband should show uverbsN and rdma_cm; modprobe ib_uverbs rdma_ucm creates them",
			hintFallback)
	case len(noUverbs) > 0 && len(present) == 0:
		return newDiag(plugins.StepProbeDevices,
			fmt.Sprintf("libibverbs found no RDMA devices: sysfs has %s but none has a uverbs device (no %s entry names them): ib_uverbs is not loaded or did not bind them",
				joinNames(noUverbs), sysfsClass(r, "infiniband_verbs")),
			"modprobe ib_uverbs (with MLNX_OFED/DOCA-OFED: /etc/init.d/openibd restart), then check dmesg for the driver's errors",
			hintFallback)
	}
	var drivers []string
	for _, d := range r.Devices {
		if d.Driver != "" && !contains(drivers, d.Driver) {
			drivers = append(drivers, d.Driver)
		}
	}
	sort.Strings(drivers)
	drv := "their driver"
	if len(drivers) > 0 {
		drv = "driver " + joinNames(drivers)
	}
	return newDiag(plugins.StepProbeDevices,
		fmt.Sprintf("libibverbs found no RDMA devices although sysfs has %s and their device nodes are accessible: libibverbs has no userspace provider for %s",
			joinNames(present), drv),
		hintProviders,
		"IBV_SHOW_WARNINGS=1 ibv_devices names the device it has no provider for",
		hintFallback)
}

// diagUnknownDevice: device_name names devices that do not exist.
func diagUnknownDevice(r *Report, unknown []string) *plugins.InitError {
	var have []string
	for _, d := range r.Devices {
		have = append(have, d.Name)
	}
	var why []string
	suggestion := ""
	for _, u := range unknown {
		if owner := netdevOwner(r, u); owner != "" {
			why = append(why, fmt.Sprintf("%s is the network interface of RDMA device %s; device_name takes RDMA device names", u, owner))
			if suggestion == "" {
				suggestion = owner
			}
			continue
		}
		if c := closest(u, have); c != "" {
			why = append(why, fmt.Sprintf("did you mean %s instead of %s?", c, u))
			if suggestion == "" {
				suggestion = c
			}
		}
	}
	cause := fmt.Sprintf("device_name %q names %s, which this host does not have; RDMA devices here: %s",
		r.DeviceName, quoteNames(unknown), joinNames(have))
	if len(why) > 0 {
		cause += " (" + strings.Join(why, "; ") + ")"
	}
	example := suggestion
	if example == "" {
		example = have[0]
	}
	return newDiag(plugins.StepProbeDevices, cause,
		fmt.Sprintf(hintSelectDevice, example),
		"ibv_devices lists the RDMA device names; ibdev2netdev (or rdma link show) maps them to network interfaces",
		hintFallback)
}

// diagSysfs: libibverbs lists a device that sysfs_root does not have.
func diagSysfs(r *Report, d *Device) *plugins.InitError {
	return newDiag(plugins.StepProbeDevices,
		fmt.Sprintf("libibverbs lists %s but %s does not exist, so its ports cannot be checked: is transports.rdma.sysfs_root (%q) this host's sysfs?",
			d.Name, d.Path, r.Options.SysfsRoot),
		"leave transports.rdma.sysfs_root at /sys unless sysfs is mounted elsewhere",
		hintDoctor)
}

// diagEFA: an AWS Elastic Fabric Adapter.
func diagEFA(d *Device) *plugins.InitError {
	drv := d.Driver
	if drv == "" {
		drv = "efa"
	}
	return newDiag(plugins.StepProbeDevices,
		fmt.Sprintf("%s is an AWS EFA adapter (driver %s, node type %q): EFA offers SRD, not the reliable-connected queue pairs the rdma transport uses; creating them fails with \"Operation not supported\"",
			d.Name, drv, d.NodeType),
		"on EFA instances set protocol efa (the libfabric EFA transport)",
		"keep tcp in fallback (the default) for hosts without EFA")
}

// diagNoUverbs: sysfs knows the device but no uverbs device names it.
func diagNoUverbs(r *Report, d *Device) *plugins.InitError {
	cause := fmt.Sprintf("%s has no uverbs device, so user space cannot open it: %s does not exist and no %s/uverbs*/ibdev names it",
		d.Name, filepath.Join(d.Path, "device", "infiniband_verbs"), sysfsClass(r, "infiniband_verbs"))
	if r.UverbsABI == "" {
		cause += "; " + sysfsClass(r, "infiniband_verbs") + " is missing: ib_uverbs is not loaded"
	}
	return newDiag(plugins.StepOpenDevice, cause,
		"modprobe ib_uverbs (with MLNX_OFED/DOCA-OFED: /etc/init.d/openibd restart); if other devices have uverbs nodes, check dmesg for errors of this device's driver",
		usableHint(r, d),
		hintFallback)
}

// diagUverbsAccess: /dev/infiniband/uverbsN cannot be opened read-write.
func diagUverbsAccess(d *Device) *plugins.InitError {
	e := errnoOf(d.UverbsErr)
	var ie *plugins.InitError
	switch {
	case e == syscall.ENOENT:
		ie = newDiag(plugins.StepOpenDevice,
			fmt.Sprintf("%s's device node %s does not exist (sysfs names it %s): /dev/infiniband is not mounted into this container, or udev did not create it",
				d.Name, d.UverbsPath, d.Uverbs),
			hintContainerRun,
			"on a bare host: modprobe ib_uverbs rdma_ucm creates /dev/infiniband/uverbsN and rdma_cm; check the udev rules if it does not",
			hintFallback)
	case e == syscall.EACCES || e == syscall.EPERM || e == syscall.EROFS:
		ie = newDiag(plugins.StepOpenDevice,
			fmt.Sprintf("%s's device node %s cannot be opened read-write by uid %d: %v", d.Name, d.UverbsPath, os.Getuid(), d.UverbsErr),
			"rdma-core's udev rules make uverbs nodes mode 0666; if yours are not, add a rule (KERNEL==\"uverbs*\", MODE=\"0666\") or run as a member of the node's group (ls -l /dev/infiniband)",
			"in a container, pass the node with --device (not a read-only bind mount) and allow it in the device cgroup",
			hintFallback)
	default:
		ie = newDiag(plugins.StepOpenDevice,
			fmt.Sprintf("%s's device node %s is not a usable uverbs character device: %v", d.Name, d.UverbsPath, d.UverbsErr),
			"check transports.rdma.dev_root (default /dev) and that /dev/infiniband holds the character devices uverbsN and rdma_cm (ls -l /dev/infiniband)",
			hintContainerRun)
	}
	if e != 0 {
		ie.NativeCode, ie.NativeName = int64(e), errnoName(e)
	}
	return ie
}

// diagNotListed: sysfs and /dev have the device; libibverbs does not list it.
func diagNotListed(r *Report, d *Device) *plugins.InitError {
	drv := d.Driver
	if drv == "" {
		drv = "unknown"
	}
	return newDiag(plugins.StepProbeDevices,
		fmt.Sprintf("libibverbs did not list %s (it listed %s) although %s is accessible: it has no userspace provider for %s's driver (%s)",
			d.Name, joinNames(r.Library.Devices), d.UverbsPath, d.Name, drv),
		hintProviders,
		"IBV_SHOW_WARNINGS=1 ibv_devices names the device it has no provider for",
		usableHint(r, d))
}

// diagPortMissing: the device has no port ib_port.
func diagPortMissing(o Options, d *Device) *plugins.InitError {
	var have []string
	for _, p := range d.Ports {
		have = append(have, fmt.Sprint(p.Num))
	}
	hint := "set transports.rdma.ib_port (MC_IB_PORT) to a port the device has"
	if len(have) > 0 {
		hint = fmt.Sprintf("set transports.rdma.ib_port (MC_IB_PORT) to %s", have[0])
	}
	return newDiag(plugins.StepOpenDevice,
		fmt.Sprintf("%s has no port %d (transports.rdma.ib_port): %s holds port(s) %s",
			d.Name, o.IBPort, filepath.Join(d.Path, "ports"), orNone(strings.Join(have, ", "))),
		hint)
}

// diagPortNotActive: the port's state is not ACTIVE.
func diagPortNotActive(r *Report, d *Device, p *Port) *plugins.InitError {
	cause := fmt.Sprintf("%s port %d is not ACTIVE: %s reads %q, want \"4: ACTIVE\"; %s reads %q; link layer %s",
		d.Name, p.Num, filepath.Join(p.Path, "state"), p.State.String(), filepath.Join(p.Path, "phys_state"), p.PhysState.String(), orNone(p.LinkLayer))
	if len(p.Errors) > 0 {
		cause += " (" + strings.Join(p.Errors, "; ") + ")"
	}
	var hints []string
	nd := firstOr(d.NetDevs, "<netdev>")
	switch {
	case p.LinkLayer == LinkInfiniBand && p.PhysState.Code == PhysLinkUp:
		cause += ": the link is up but no subnet manager has configured the port"
		hints = append(hints,
			"start a subnet manager: opensm on one node of the fabric (systemctl enable --now opensm), or enable the SM on the managed switch / UFM",
			fmt.Sprintf("ibstat %s shows State: Initializing until an SM sweeps the port; sminfo finds the SM", d.Name))
	case p.LinkLayer == LinkInfiniBand:
		cause += ": the port has no physical link"
		hints = append(hints,
			fmt.Sprintf("check the cable and the switch port: ibstat %s (Physical state Polling means no peer), iblinkinfo on the fabric", d.Name),
			"check the port runs InfiniBand, not Ethernet (mlxconfig -d <pci> query LINK_TYPE_P1)")
		if p.PhysState.Code == PhysDisabled {
			hints = append(hints, fmt.Sprintf("the port is administratively disabled: ibportstate -C %s <lid> %d enable, or enable it on the switch", d.Name, p.Num))
		}
	case p.LinkLayer == LinkEthernet && p.PhysState.Code == PhysDisabled:
		cause += fmt.Sprintf(": its network interface %s is down", nd)
		hints = append(hints,
			fmt.Sprintf("bring the interface up: ip link set %s up (and configure it in netplan/NetworkManager so it stays up)", nd),
			fmt.Sprintf("ip link show %s and ethtool %s show the link", nd, nd))
	default:
		cause += ": the Ethernet link is down"
		hints = append(hints,
			fmt.Sprintf("check the cable, the transceiver and the switch port: ethtool %s shows Link detected; ip link show %s", nd, nd),
			fmt.Sprintf("ibv_devinfo -d %s shows the port state as verbs sees it", d.Name))
	}
	hints = append(hints, usableHint(r, d), hintFallback)
	return newDiag(plugins.StepOpenDevice, cause, hints...)
}

// diagNoGID: the port has no usable GID, or gid_index names an empty one.
func diagNoGID(o Options, d *Device, p *Port) *plugins.InitError {
	gids := filepath.Join(p.Path, "gids")
	var set []string
	best := -1
	for _, g := range p.GIDs {
		set = append(set, g.String())
	}
	if g, ok := p.pickGID(-1); ok {
		best = g.Index
	}
	if o.GIDIndex >= 0 {
		var cause string
		if o.GIDIndex >= p.GIDTableLen {
			cause = fmt.Sprintf("transports.rdma.gid_index %d is out of range on %s port %d: %s has %d entries",
				o.GIDIndex, d.Name, p.Num, gids, p.GIDTableLen)
		} else {
			raw, err := readAttr(filepath.Join(gids, fmt.Sprint(o.GIDIndex)))
			if err != nil {
				raw = err.Error()
			}
			cause = fmt.Sprintf("transports.rdma.gid_index %d on %s port %d is not usable: %s reads %q, want a non-zero GID",
				o.GIDIndex, d.Name, p.Num, filepath.Join(gids, fmt.Sprint(o.GIDIndex)), raw)
		}
		cause += "; set entries: " + orNone(strings.Join(set, ", "))
		hint := "set transports.rdma.gid_index (MC_GID_INDEX) to a set entry, or -1 to pick one"
		if best >= 0 {
			hint = fmt.Sprintf("set transports.rdma.gid_index (MC_GID_INDEX) to %d, or -1 to pick one (a RoCE v2 IPv4 GID on RoCE)", best)
		}
		return newDiag(plugins.StepOpenDevice, cause, hint,
			fmt.Sprintf("show_gids (or ibv_devinfo -v -d %s) lists the GID table with types and interfaces", d.Name))
	}
	cause := fmt.Sprintf("%s port %d has no usable GID: all %d entries of %s are zero", d.Name, p.Num, p.GIDTableLen, gids)
	var hints []string
	if p.LinkLayer == LinkEthernet {
		nd := firstOr(d.NetDevs, "<netdev>")
		cause += fmt.Sprintf(" (RoCE GIDs come from the IP addresses of the port's network interface %s, which has none)", nd)
		hints = append(hints,
			fmt.Sprintf("give %s an IP address (ip addr add <ip>/<len> dev %s); RoCE v2 needs an IPv4 or IPv6 address on the interface", nd, nd),
			"in a container with its own network namespace, the RDMA device must be visible in it: use host networking, or rdma system set netns exclusive and move the device (rdma dev set <dev> netns <ns>)",
			"then set transports.rdma.gid_index (MC_GID_INDEX) to the RoCE v2 entry, or leave it -1 to pick one; show_gids lists the table")
	} else {
		hints = append(hints,
			fmt.Sprintf("an InfiniBand port's GID 0 is its subnet prefix and port GUID; ibstat %s and the subnet manager's logs show whether the port was configured", d.Name),
			"set transports.rdma.gid_index (MC_GID_INDEX) once a set entry exists")
	}
	return newDiag(plugins.StepOpenDevice, cause, hints...)
}

// diagMemlock: RLIMIT_MEMLOCK below min_memlock and no CAP_IPC_LOCK.
func diagMemlock(r *Report) *plugins.InitError {
	m := r.Memlock
	return newDiag(plugins.StepRegisterMemory,
		fmt.Sprintf("RLIMIT_MEMLOCK is %s (hard %s) and the process lacks CAP_IPC_LOCK, below transports.rdma.min_memlock %s: registering memory pins it, and ibv_reg_mr fails with ENOMEM past the limit",
			fmtLimit(m.Soft, m.SoftUnlimited), fmtLimit(m.Hard, m.HardUnlimited), fmtLimit(uint64(r.Options.MinMemlock), false)),
		"raise the limit for the serving process: ulimit -l unlimited in its shell, or * soft memlock unlimited / * hard memlock unlimited in /etc/security/limits.conf",
		"systemd service: LimitMEMLOCK=infinity in the unit ([Service])",
		"docker: --ulimit memlock=-1 (or --cap-add IPC_LOCK); Kubernetes: add capability IPC_LOCK, and raise the container runtime's limit (LimitMEMLOCK=infinity in containerd's or dockerd's unit)",
		"the KV cache is registered whole, so the limit must cover all of it; lower transports.rdma.min_memlock only if less is registered")
}

// usableHint names the other devices that passed, for "use another one".
func usableHint(r *Report, bad *Device) string {
	var ok []string
	for _, d := range r.Devices {
		if d.Name != bad.Name && d.check == "" {
			ok = append(ok, d.Name)
		}
	}
	if len(ok) == 0 {
		return hintDoctor
	}
	return fmt.Sprintf("or leave %s out: devices that passed every check: %s (device_name=%s)", bad.Name, joinNames(ok), strings.Join(ok, ","))
}

// netdevOwner returns the RDMA device whose network interface is called name.
func netdevOwner(r *Report, name string) string {
	for _, d := range r.Devices {
		if contains(d.NetDevs, name) {
			return d.Name
		}
	}
	return ""
}

// closest returns the candidate near enough to s to be a typo of it.
func closest(s string, candidates []string) string { return plugins.Closest(s, candidates) }

func errnoOf(err error) syscall.Errno {
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	return 0
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func quoteNames(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	return strings.Join(q, ", ")
}

func firstOr(list []string, def string) string {
	if len(list) > 0 {
		return list[0]
	}
	return def
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
