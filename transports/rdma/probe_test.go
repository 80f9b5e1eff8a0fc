package rdma

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/units"
)

// fixture returns the absolute sys and dev roots of testdata/<name>.
func fixture(t testing.TB, name string) (sys, dev string) {
	t.Helper()
	abs, err := filepath.Abs(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(abs, "sys"), filepath.Join(abs, "dev")
}

// listed is a library result for the checks after the library stage: the
// library loaded and ibv_get_device_list returned these devices. Only the
// library's answer is simulated; everything after it reads the fixture.
func listed(names ...string) Loader {
	return func(context.Context) Library {
		return Library{Soname: LibibverbsSoname, Loaded: true, Listed: true, Devices: names}
	}
}

// truncatedList is a list whose names did not all fit (a host with
// hundreds of virtual functions): names is what was read of it.
func truncatedList(names ...string) Loader {
	return func(context.Context) Library {
		return Library{Soname: LibibverbsSoname, Loaded: true, Listed: true, Devices: names, Truncated: true}
	}
}

// listFailed simulates ibv_get_device_list returning NULL with errno e.
// Used only for the variants this host cannot produce with the real
// library (see TestProbeFixtures); ENOSYS itself is tested for real.
func listFailed(e syscall.Errno) Loader {
	return func(context.Context) Library {
		return Library{Soname: LibibverbsSoname, Loaded: true, ListErrno: e}
	}
}

var (
	unlimited = func() Memlock { return Memlock{SoftUnlimited: true, HardUnlimited: true} }
	lowLimit  = func() Memlock { return Memlock{Soft: 64 << 10, Hard: 64 << 10} }
)

type probeCase struct {
	name       string
	fixture    string // testdata/<fixture>/sys
	dev        string // dev root fixture ("" = the fixture's own dev/; "empty" = an empty directory)
	deviceName string
	opts       func(*Options)
	loader     Loader
	memlock    func() Memlock

	check      Check
	step       string
	nativeName string
	nativeCode int64
	cause      []string // substrings of the diagnosis cause
	hints      []string // substrings that some hint must contain
	usable     []string // for CheckOK
	notes      []string
	gidIndex   map[string]int
}

func runProbe(t *testing.T, c probeCase) Report {
	t.Helper()
	sys, dev := fixture(t, c.fixture)
	switch c.dev {
	case "":
	case "empty":
		dev = t.TempDir()
	default:
		_, dev = fixture(t, c.dev)
	}
	o := DefaultOptions()
	o.SysfsRoot, o.DevRoot = sys, dev
	if c.opts != nil {
		c.opts(&o)
	}
	mem := c.memlock
	if mem == nil {
		mem = unlimited
	}
	return Probe(context.Background(), ProbeOptions{DeviceName: c.deviceName, Options: o, Loader: c.loader, Memlock: mem})
}

func TestProbeFixtures(t *testing.T) {
	cases := []probeCase{
		// Healthy hosts.
		{name: "ib healthy, every device", fixture: "ib-healthy", loader: listed("mlx5_0", "mlx5_1"),
			check: CheckOK, usable: []string{"mlx5_0", "mlx5_1"}, gidIndex: map[string]int{"mlx5_0": 0, "mlx5_1": 0}},
		{name: "ib healthy, one device", fixture: "ib-healthy", deviceName: "mlx5_1", loader: listed("mlx5_0", "mlx5_1"),
			check: CheckOK, usable: []string{"mlx5_1"}},
		{name: "ib healthy, comma list", fixture: "ib-healthy", deviceName: " mlx5_0, mlx5_1,", loader: listed("mlx5_0", "mlx5_1"),
			check: CheckOK, usable: []string{"mlx5_0", "mlx5_1"}},
		{name: "roce healthy picks RoCE v2 IPv4 GID", fixture: "roce-healthy", loader: listed("mlx5_0"),
			check: CheckOK, usable: []string{"mlx5_0"}, gidIndex: map[string]int{"mlx5_0": 3}},
		{name: "roce explicit gid_index 1", fixture: "roce-healthy", loader: listed("mlx5_0"), opts: func(o *Options) { o.GIDIndex = 1 },
			check: CheckOK, usable: []string{"mlx5_0"}, gidIndex: map[string]int{"mlx5_0": 1}},

		// Library stage variants the real library cannot produce on this
		// host (it needs accessible /dev/infiniband nodes to reach the ABI
		// check, and EPERM needs a seccomp policy); the ENOSYS cases are
		// also tested with the real libibverbs in TestPluginRealLibrary.
		{name: "ENOSYS, HCA driver loaded without ib_uverbs", fixture: "no-uverbs-module", loader: listFailed(syscall.ENOSYS),
			check: CheckDeviceList, step: plugins.StepProbeDevices, nativeName: "ENOSYS", nativeCode: 38,
			cause: []string{"ENOSYS", "mlx5_0", "class/infiniband_verbs is missing", "ib_uverbs module is not loaded"},
			hints: []string{"modprobe ib_uverbs", "--device /dev/infiniband", "protocol tcp"}},
		{name: "ENOSYS, uverbs ABI rejected", fixture: "ib-healthy", loader: listFailed(syscall.ENOSYS),
			check: CheckDeviceList, step: plugins.StepProbeDevices, nativeName: "ENOSYS", nativeCode: 38,
			cause: []string{"abi_version = \"6\"", "do not match"}, hints: []string{"rdma-core"}},
		{name: "EPERM", fixture: "ib-healthy", loader: listFailed(syscall.EPERM),
			check: CheckDeviceList, step: plugins.StepProbeDevices, nativeName: "EPERM", nativeCode: 1,
			cause: []string{"ibv_get_device_list failed with EPERM (operation not permitted): the process may not enumerate RDMA devices"}, hints: []string{"seccomp", "--cap-add IPC_LOCK"}},
		{name: "ENOSYS still names the device_name asked for", fixture: "no-uverbs-module", deviceName: "mlx5_9", loader: listFailed(syscall.ENOSYS),
			check: CheckDeviceList, step: plugins.StepProbeDevices, nativeName: "ENOSYS", nativeCode: 38,
			cause: []string{"ENOSYS", "device_name asked for mlx5_9"}},
		{name: "ENOMEM", fixture: "ib-healthy", loader: listFailed(syscall.ENOMEM),
			check: CheckDeviceList, step: plugins.StepProbeDevices, nativeName: "ENOMEM", nativeCode: 12,
			cause: []string{"ibv_get_device_list failed with ENOMEM (cannot allocate memory)"}, hints: []string{"ibv_devices"}},

		// Zero devices.
		{name: "no devices at all", fixture: "no-devices", loader: listed(),
			check: CheckNoDevices, step: plugins.StepProbeDevices,
			cause: []string{"found no RDMA devices", "class/infiniband lists none", "ib_uverbs is loaded"},
			hints: []string{"lspci", "mlx5_ib", "protocol tcp"}},
		{name: "no devices: container without /dev/infiniband", fixture: "ib-healthy", dev: "empty", loader: listed(),
			check: CheckNoDevices, step: plugins.StepProbeDevices,
			cause: []string{"sysfs has mlx5_0, mlx5_1", "infiniband/uverbs0", "/dev/infiniband is not mounted into this container"},
			hints: []string{"--device /dev/infiniband", "--cap-add IPC_LOCK", "Kubernetes"}},
		{name: "no devices: no userspace provider", fixture: "ib-healthy", loader: listed(),
			check: CheckNoDevices, step: plugins.StepProbeDevices,
			cause: []string{"no userspace provider for driver mlx5_core", "device nodes are accessible"},
			hints: []string{"ibverbs-providers", "IBV_SHOW_WARNINGS=1"}},
		{name: "no devices: ib_uverbs did not bind", fixture: "no-uverbs-module", loader: listed(),
			check: CheckNoDevices, step: plugins.StepProbeDevices,
			cause: []string{"none has a uverbs device"}, hints: []string{"modprobe ib_uverbs"}},

		// device_name.
		{name: "unknown device, typo", fixture: "ib-healthy", deviceName: "mlx5_2", loader: listed("mlx5_0", "mlx5_1"),
			check: CheckUnknownDevice, step: plugins.StepProbeDevices,
			cause: []string{`device_name "mlx5_2" names "mlx5_2"`, "RDMA devices here: mlx5_0, mlx5_1", "did you mean mlx5_0 instead of mlx5_2?"},
			hints: []string{"device_name (MOONCAKE_DEVICE", "e.g. mlx5_0", "ibv_devices"}},
		{name: "unknown device, netdev name", fixture: "ib-healthy", deviceName: "ib1", loader: listed("mlx5_0", "mlx5_1"),
			check: CheckUnknownDevice, step: plugins.StepProbeDevices,
			cause: []string{"ib1 is the network interface of RDMA device mlx5_1"}, hints: []string{"e.g. mlx5_1", "ibdev2netdev"}},
		{name: "unknown device in a list", fixture: "ib-healthy", deviceName: "mlx5_0,bond0", loader: listed("mlx5_0", "mlx5_1"),
			check: CheckUnknownDevice, step: plugins.StepProbeDevices,
			cause: []string{`names "bond0"`, "RDMA devices here: mlx5_0, mlx5_1"}},
		{name: "device_name is a per-GPU map", fixture: "ib-healthy", deviceName: `{"0":"mlx5_0"}`, loader: listed("mlx5_0"),
			check: CheckConfig, step: plugins.StepConfigure, cause: []string{"per-device map", "local_device_index"}},
		{name: "libibverbs lists a device sysfs lacks", fixture: "ib-healthy", deviceName: "mlx5_7", loader: listed("mlx5_0", "mlx5_1", "mlx5_7"),
			check: CheckSysfs, step: plugins.StepProbeDevices,
			cause: []string{"libibverbs lists mlx5_7 but", "class/infiniband/mlx5_7 does not exist", "sysfs_root"}},

		// EFA.
		{name: "EFA host, every device", fixture: "efa", loader: listed("rdmap16s27"),
			check: CheckEFA, step: plugins.StepProbeDevices,
			cause: []string{"rdmap16s27 is an AWS EFA adapter (driver efa", `"7: unspecified"`, "Operation not supported"},
			hints: []string{"protocol efa"}},
		{name: "EFA device named", fixture: "efa", deviceName: "rdmap16s27", loader: listed("rdmap16s27"),
			check: CheckEFA, step: plugins.StepProbeDevices, hints: []string{"protocol efa"}},

		// uverbs device and node.
		{name: "device without uverbs", fixture: "no-uverbs", deviceName: "mlx5_1", loader: listed("mlx5_0"),
			check: CheckNoUverbs, step: plugins.StepOpenDevice,
			cause: []string{"mlx5_1 has no uverbs device", "class/infiniband/mlx5_1/device/infiniband_verbs does not exist", "infiniband_verbs/uverbs*/ibdev names it"},
			hints: []string{"modprobe ib_uverbs", "devices that passed every check: mlx5_0"}},
		{name: "device without uverbs skipped when auto", fixture: "no-uverbs", loader: listed("mlx5_0"),
			check: CheckOK, usable: []string{"mlx5_0"}, notes: []string{"skipped mlx5_1: mlx5_1 has no uverbs device"}},
		{name: "uverbs node missing", fixture: "ib-healthy", dev: "empty", deviceName: "mlx5_0", loader: listed("mlx5_0", "mlx5_1"),
			check: CheckUverbsAccess, step: plugins.StepOpenDevice, nativeName: "ENOENT", nativeCode: 2,
			cause: []string{"mlx5_0's device node", "infiniband/uverbs0 does not exist", "sysfs names it uverbs0", "not mounted into this container"},
			hints: []string{"--device /dev/infiniband", "modprobe ib_uverbs rdma_ucm"}},
		{name: "uverbs parent is a file", fixture: "ib-healthy", dev: "dev-notdir", deviceName: "mlx5_0", loader: listed("mlx5_0", "mlx5_1"),
			check: CheckUverbsAccess, step: plugins.StepOpenDevice, nativeName: "ENOTDIR", nativeCode: 20,
			cause: []string{"is not a usable uverbs character device", "not a directory"}, hints: []string{"dev_root"}},
		{name: "uverbs node is a directory", fixture: "ib-healthy", dev: "dev-isdir", deviceName: "mlx5_0", loader: listed("mlx5_0", "mlx5_1"),
			check: CheckUverbsAccess, step: plugins.StepOpenDevice, nativeName: "EISDIR", nativeCode: 21,
			cause: []string{"dev-isdir/dev/infiniband/uverbs0 is not a usable uverbs character device", "is a directory"}},
		{name: "past the cut of a truncated list", fixture: "ib-healthy", deviceName: "mlx5_1", loader: truncatedList("mlx5_0"),
			check: CheckOK, usable: []string{"mlx5_1"}, notes: []string{"libibverbs listed more devices than kvconnect reads"}},
		{name: "not listed by libibverbs", fixture: "ib-healthy", deviceName: "mlx5_1", loader: listed("mlx5_0"),
			check: CheckNotListed, step: plugins.StepProbeDevices,
			cause: []string{"libibverbs did not list mlx5_1 (it listed mlx5_0)", "no userspace provider", "mlx5_core"},
			hints: []string{"ibverbs-providers", "devices that passed every check: mlx5_0"}},

		// Ports.
		{name: "ib port down", fixture: "ib-port-down", loader: listed("mlx5_0"),
			check: CheckPortNotActive, step: plugins.StepOpenDevice,
			cause: []string{"mlx5_0 port 1 is not ACTIVE", `ports/1/state reads "1: DOWN", want "4: ACTIVE"`, `"2: Polling"`, "InfiniBand", "no physical link"},
			hints: []string{"cable", "ibstat mlx5_0", "iblinkinfo"}},
		{name: "ib port without subnet manager", fixture: "ib-port-init", loader: listed("mlx5_0"),
			check: CheckPortNotActive, step: plugins.StepOpenDevice,
			cause: []string{`reads "2: INIT"`, `"5: LinkUp"`, "no subnet manager"},
			hints: []string{"opensm", "sminfo"}},
		{name: "roce port down", fixture: "roce-port-down", loader: listed("mlx5_0"),
			check: CheckPortNotActive, step: plugins.StepOpenDevice,
			cause: []string{`reads "1: DOWN"`, `"3: Disabled"`, "Ethernet", "network interface ens1f0np0 is down"},
			hints: []string{"ip link set ens1f0np0 up"}},
		{name: "port missing", fixture: "ib-healthy", deviceName: "mlx5_0", opts: func(o *Options) { o.IBPort = 2 }, loader: listed("mlx5_0", "mlx5_1"),
			check: CheckPortMissing, step: plugins.StepOpenDevice,
			cause: []string{"mlx5_0 has no port 2", "holds port(s) 1"}, hints: []string{"ib_port (MC_IB_PORT) to 1"}},

		// GIDs.
		{name: "roce empty GID table", fixture: "roce-gid-empty", loader: listed("mlx5_0"),
			check: CheckNoGID, step: plugins.StepOpenDevice,
			cause: []string{"mlx5_0 port 1 has no usable GID", "all 16 entries", "ens1f0np0, which has none"},
			hints: []string{"ip addr add", "network namespace", "gid_index (MC_GID_INDEX)", "show_gids"}},
		{name: "gid_index names an empty entry", fixture: "roce-healthy", loader: listed("mlx5_0"), opts: func(o *Options) { o.GIDIndex = 5 },
			check: CheckNoGID, step: plugins.StepOpenDevice,
			cause: []string{"gid_index 5 on mlx5_0 port 1 is not usable", `gids/5 reads "0000:0000:0000:0000:0000:0000:0000:0000"`, "3 ::ffff:10.0.10.7 RoCE v2 ens1f0np0"},
			hints: []string{"gid_index (MC_GID_INDEX) to 3"}},
		{name: "gid_index out of range", fixture: "roce-healthy", loader: listed("mlx5_0"), opts: func(o *Options) { o.GIDIndex = 200 },
			check: CheckNoGID, step: plugins.StepOpenDevice,
			cause: []string{"gid_index 200 is out of range", "has 16 entries"}, hints: []string{"to 3"}},

		// memlock.
		{name: "memlock too low", fixture: "ib-healthy", loader: listed("mlx5_0", "mlx5_1"), memlock: lowLimit,
			check: CheckMemlock, step: plugins.StepRegisterMemory,
			cause: []string{"RLIMIT_MEMLOCK is 64KiB (hard 64KiB)", "lacks CAP_IPC_LOCK", "min_memlock 64MiB", "ENOMEM"},
			hints: []string{"ulimit -l unlimited", "LimitMEMLOCK=infinity", "--ulimit memlock=-1"}},
		{name: "memlock low but CAP_IPC_LOCK", fixture: "ib-healthy", loader: listed("mlx5_0", "mlx5_1"),
			memlock: func() Memlock { m := lowLimit(); m.CapIPCLock = true; return m },
			check:   CheckOK, usable: []string{"mlx5_0", "mlx5_1"}, notes: []string{"has CAP_IPC_LOCK"}},
		{name: "memlock high enough", fixture: "ib-healthy", loader: listed("mlx5_0", "mlx5_1"),
			memlock: func() Memlock { return Memlock{Soft: 128 << 20, Hard: 128 << 20} }, check: CheckOK},
		{name: "memlock check disabled", fixture: "ib-healthy", loader: listed("mlx5_0", "mlx5_1"), memlock: lowLimit,
			opts: func(o *Options) { o.MinMemlock = 0 }, check: CheckOK},
		{name: "memlock raised min", fixture: "ib-healthy", loader: listed("mlx5_0", "mlx5_1"),
			memlock: func() Memlock { return Memlock{Soft: 128 << 20, Hard: 128 << 20} },
			opts:    func(o *Options) { o.MinMemlock = units.Size(1 << 30) },
			check:   CheckMemlock, cause: []string{"RLIMIT_MEMLOCK is 128MiB", "min_memlock 1GiB"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := runProbe(t, c)
			if r.Check != c.check {
				t.Fatalf("check = %s, want %s\n%s", r.Check, c.check, r)
			}
			if c.check == CheckOK {
				if r.Diagnosis != nil {
					t.Fatalf("diagnosis %v on a passing report", r.Diagnosis)
				}
				if c.usable != nil && !slices.Equal(r.Usable, c.usable) {
					t.Errorf("usable = %v, want %v", r.Usable, c.usable)
				}
				for dev, want := range c.gidIndex {
					if d := r.Device(dev); d == nil || d.GIDIndex != want {
						t.Errorf("%s: GID index = %+v, want %d", dev, d, want)
					}
				}
			} else {
				checkDiag(t, r.Diagnosis, c.step, c.nativeName, c.nativeCode, c.cause, c.hints)
				wantSentinel := plugins.ErrUnavailable
				if c.check == CheckConfig {
					wantSentinel = plugins.ErrInvalidArgument
				}
				if !errors.Is(r.Diagnosis, wantSentinel) {
					t.Errorf("diagnosis does not wrap %v", wantSentinel)
				}
			}
			for _, n := range c.notes {
				if !slices.ContainsFunc(r.Notes, func(s string) bool { return strings.Contains(s, n) }) {
					t.Errorf("notes %q lack %q", r.Notes, n)
				}
			}
			// The report always renders, whatever it holds.
			if s := r.String(); !strings.Contains(s, "verdict: ") {
				t.Errorf("report text lacks a verdict:\n%s", s)
			}
		})
	}
}

func checkDiag(t *testing.T, ie *plugins.InitError, step, nativeName string, nativeCode int64, cause, hints []string) {
	t.Helper()
	if ie == nil {
		t.Fatal("no diagnosis")
	}
	if ie.Transport != Name {
		t.Errorf("transport = %q", ie.Transport)
	}
	if step != "" && ie.Step != step {
		t.Errorf("step = %q, want %q", ie.Step, step)
	}
	if ie.NativeName != nativeName || ie.NativeCode != nativeCode {
		t.Errorf("native = %s %d, want %s %d", ie.NativeName, ie.NativeCode, nativeName, nativeCode)
	}
	for _, s := range cause {
		if !strings.Contains(ie.Cause, s) {
			t.Errorf("cause lacks %q:\n%s", s, ie.Cause)
		}
	}
	if len(ie.Hints) == 0 && ie.Step != plugins.StepConfigure {
		t.Errorf("no hints")
	}
	for _, h := range hints {
		if !slices.ContainsFunc(ie.Hints, func(s string) bool { return strings.Contains(s, h) }) {
			t.Errorf("no hint contains %q:\n%s", h, strings.Join(ie.Hints, "\n"))
		}
	}
}

// Each cause has its own text: no two failing cases share a cause.
func TestProbeDiagnosesAreDistinct(t *testing.T) {
	cases := []probeCase{
		{fixture: "ib-healthy", dev: "empty", loader: listed()},
		{fixture: "ib-healthy", loader: listed()},
		{fixture: "no-devices", loader: listed()},
		{fixture: "ib-healthy", deviceName: "mlx5_9", loader: listed("mlx5_0", "mlx5_1")},
		{fixture: "efa", loader: listed("rdmap16s27")},
		{fixture: "no-uverbs", deviceName: "mlx5_1", loader: listed("mlx5_0")},
		{fixture: "ib-healthy", dev: "empty", deviceName: "mlx5_0", loader: listed("mlx5_0", "mlx5_1")},
		{fixture: "ib-healthy", deviceName: "mlx5_1", loader: listed("mlx5_0")},
		{fixture: "ib-port-down", loader: listed("mlx5_0")},
		{fixture: "ib-port-init", loader: listed("mlx5_0")},
		{fixture: "roce-port-down", loader: listed("mlx5_0")},
		{fixture: "roce-gid-empty", loader: listed("mlx5_0")},
		{fixture: "ib-healthy", loader: listed("mlx5_0", "mlx5_1"), memlock: lowLimit},
	}
	seen := map[string]int{}
	for i, c := range cases {
		r := runProbe(t, c)
		if r.Diagnosis == nil {
			t.Fatalf("case %d passed", i)
		}
		first := strings.SplitN(r.Diagnosis.Cause, ":", 2)[0] + r.Diagnosis.Cause[len(r.Diagnosis.Cause)-20:]
		if j, dup := seen[first]; dup {
			t.Errorf("cases %d and %d share a cause: %s", j, i, r.Diagnosis.Cause)
		}
		seen[first] = i
	}
}

// A report gathers every device even when an early check fails.
func TestProbeReportsEverythingAfterAFailure(t *testing.T) {
	r := runProbe(t, probeCase{fixture: "roce-healthy", loader: listFailed(syscall.ENOSYS)})
	if r.Check != CheckDeviceList {
		t.Fatalf("check = %s", r.Check)
	}
	d := r.Device("mlx5_0")
	if d == nil || len(d.Ports) != 1 || d.Ports[0].LinkLayer != LinkEthernet || len(d.Ports[0].GIDs) != 4 {
		t.Fatalf("device not gathered: %+v", d)
	}
	if d.Uverbs != "uverbs0" || d.UverbsErr != nil || d.Driver != "mlx5_core" || d.HCAType != "MT4125" || !slices.Equal(d.NetDevs, []string{"ens1f0np0"}) {
		t.Errorf("device = %+v", d)
	}
	if g := d.Ports[0].GIDs[3]; g.Index != 3 || g.Type != GIDTypeRoCEv2 || g.NetDev != "ens1f0np0" || g.Addr.String() != "::ffff:10.0.10.7" || !g.IPv4() {
		t.Errorf("gid 3 = %+v", g)
	}
	s := r.String()
	for _, want := range []string{"device mlx5_0:", `port 1: state "4: ACTIVE"`, "gid 3 ::ffff:10.0.10.7 RoCE v2 ens1f0np0", "verdict: device-list-failed"} {
		if !strings.Contains(s, want) {
			t.Errorf("report text lacks %q:\n%s", want, s)
		}
	}
}

func TestProbeOptionErrors(t *testing.T) {
	for _, c := range []struct {
		mod  func(*Options)
		want string
	}{
		{func(o *Options) { o.GIDIndex = -2 }, "transports.rdma.gid_index = -2"},
		{func(o *Options) { o.IBPort = 300 }, "transports.rdma.ib_port = 300"},
	} {
		o := DefaultOptions()
		c.mod(&o)
		r := Probe(context.Background(), ProbeOptions{Options: o, Loader: listed(), Memlock: unlimited})
		if r.Check != CheckConfig || !errors.Is(r.Diagnosis, plugins.ErrInvalidArgument) || !strings.Contains(r.Diagnosis.Cause, c.want) {
			t.Errorf("%s: got %s %v", c.want, r.Check, r.Diagnosis)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := Probe(ctx, ProbeOptions{Options: DefaultOptions(), Loader: listed()})
	if r.Check != CheckCanceled || !errors.Is(r.Diagnosis, plugins.ErrCanceled) {
		t.Errorf("canceled probe: %s %v", r.Check, r.Diagnosis)
	}
}

// The port-state variants no fixture holds: an Ethernet port without link,
// an administratively disabled InfiniBand port.
func TestPortNotActiveVariants(t *testing.T) {
	for _, c := range []struct {
		ll    string
		state State
		phys  State
		cause string
		hint  string
	}{
		{LinkEthernet, State{1, "DOWN"}, State{2, "Polling"}, "the Ethernet link is down", "ethtool ens1f0np0"},
		{LinkInfiniBand, State{1, "DOWN"}, State{3, "Disabled"}, "the port has no physical link", "ibportstate -C mlx5_0 <lid> 1 enable"},
	} {
		p := Port{Num: 1, Path: "/sys/class/infiniband/mlx5_0/ports/1", State: c.state, PhysState: c.phys, LinkLayer: c.ll}
		d := &Device{Name: "mlx5_0", NetDevs: []string{"ens1f0np0"}, Ports: []Port{p}}
		r := &Report{Options: DefaultOptions(), Devices: []Device{*d}}
		ie := diagPortNotActive(r, d, &p)
		checkDiag(t, ie, plugins.StepOpenDevice, "", 0,
			[]string{`/sys/class/infiniband/mlx5_0/ports/1/state reads "` + c.state.String() + `", want "4: ACTIVE"`, c.cause}, []string{c.hint})
	}
}
