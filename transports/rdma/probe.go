package rdma

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/kvconnect/kvconnect/plugins"
)

// Check names the preflight check a Report failed on.
type Check string

// The preflight's checks, in the order they run.
const (
	CheckOK            Check = "ok"
	CheckCanceled      Check = "canceled"
	CheckConfig        Check = "config"                   // bad options or device_name
	CheckLibrary       Check = "library-missing"          // libibverbs cannot be loaded (or no cgo)
	CheckDeviceList    Check = "device-list-failed"       // ibv_get_device_list returned NULL (ENOSYS)
	CheckNoDevices     Check = "no-devices"               // ibv_get_device_list returned no device
	CheckUnknownDevice Check = "unknown-device"           // device_name names a device that does not exist
	CheckSysfs         Check = "sysfs-missing"            // a device libibverbs lists has no sysfs entry
	CheckEFA           Check = "efa-device"               // the device is an AWS EFA adapter
	CheckNoUverbs      Check = "no-uverbs-device"         // sysfs has no uverbs device for the device
	CheckUverbsAccess  Check = "uverbs-not-accessible"    // /dev/infiniband/uverbsN cannot be opened read-write
	CheckNotListed     Check = "not-listed-by-libibverbs" // sysfs and /dev have it, libibverbs does not (no provider)
	CheckPortMissing   Check = "port-missing"             // the device has no port ib_port
	CheckPortNotActive Check = "port-not-active"          // the port is not ACTIVE
	CheckNoGID         Check = "no-usable-gid"            // no usable GID (or gid_index names an empty one)
	CheckMemlock       Check = "memlock-too-low"          // RLIMIT_MEMLOCK below min_memlock, no CAP_IPC_LOCK
)

// ProbeOptions says what to probe and where.
type ProbeOptions struct {
	// DeviceName is device_name: "" = every device, "mlx5_0", or a comma
	// list "mlx5_0,mlx5_1".
	DeviceName string
	// Options are the transport's options; start from DefaultOptions().
	// Empty roots mean /sys and /dev, IBPort 0 means 1; GIDIndex 0 is an
	// explicit index (-1 is auto).
	Options Options
	// Loader loads libibverbs and lists devices; nil means LoadLibibverbs.
	Loader Loader
	// Memlock reads the locked-memory limit; nil means ReadMemlock.
	Memlock func() Memlock
}

// Report is everything the preflight found, and its verdict.
type Report struct {
	DeviceName string
	Options    Options
	Library    Library
	// SysfsDevices are the names under <sysfs>/class/infiniband.
	SysfsDevices []string
	// UverbsABI is <sysfs>/class/infiniband_verbs/abi_version ("" when
	// ib_uverbs is not loaded).
	UverbsABI string
	// Devices are every device sysfs or libibverbs knows, by name.
	Devices []Device
	// Selected are the devices the preflight checked (device_name, or
	// every device when it is empty); Usable those that passed.
	Selected []string
	Usable   []string
	Memlock  Memlock
	// Notes are observations that did not fail the preflight.
	Notes []string
	// Check is the check that failed, CheckOK when all passed.
	Check Check
	// Diagnosis is nil when every check passed; otherwise what failed,
	// why and what to do, wrapping plugins.ErrUnavailable (or
	// ErrInvalidArgument for bad options, ErrCanceled when ctx ended).
	Diagnosis *plugins.InitError
}

// Device returns the report's device called name, or nil.
func (r *Report) Device(name string) *Device {
	for i := range r.Devices {
		if r.Devices[i].Name == name {
			return &r.Devices[i]
		}
	}
	return nil
}

// Probe runs the preflight: it loads libibverbs and lists its devices,
// reads every device's state from sysfs (ports, link layer, GIDs, uverbs
// node), checks the uverbs nodes can be opened and the memlock limit, and
// returns what it found with the first failing check's diagnosis. It
// gathers everything even after a failure, so the report shows the whole
// host. It opens no device and changes nothing.
func Probe(ctx context.Context, po ProbeOptions) Report {
	o := po.Options
	if o.SysfsRoot == "" {
		o.SysfsRoot = DefaultSysfsRoot
	}
	if o.DevRoot == "" {
		o.DevRoot = DefaultDevRoot
	}
	if o.IBPort == 0 {
		o.IBPort = 1
	}
	r := Report{DeviceName: po.DeviceName, Options: o, Check: CheckOK}
	if err := ctx.Err(); err != nil {
		r.fail(CheckCanceled, &plugins.InitError{Transport: Name, Step: plugins.StepProbeDevices,
			Cause: "preflight canceled: " + err.Error(), Err: plugins.ContextError(err)})
		return r
	}
	if err := o.validate(); err != nil {
		r.fail(CheckConfig, configError(err))
		return r
	}
	names, err := parseDeviceNames(po.DeviceName)
	if err != nil {
		r.fail(CheckConfig, configError(err))
		return r
	}
	loader, memlock := po.Loader, po.Memlock
	if loader == nil {
		loader = LoadLibibverbs
	}
	if memlock == nil {
		memlock = ReadMemlock
	}
	r.Library = loader(ctx)
	if r.Library.Truncated {
		r.Notes = append(r.Notes, fmt.Sprintf("libibverbs listed more devices than kvconnect reads (64 KiB of names, %d read): those past the cut are not checked against its list", len(r.Library.Devices)))
	}
	r.Memlock = memlock()
	r.UverbsABI, _ = readAttr(filepath.Join(o.SysfsRoot, "class", "infiniband_verbs", "abi_version"))
	sysNames, err := listDevices(o.SysfsRoot)
	if err != nil {
		r.Notes = append(r.Notes, "cannot list RDMA devices in sysfs: "+err.Error())
	}
	r.SysfsDevices = sysNames
	all := append(slices.Clone(sysNames), r.Library.Devices...)
	sort.Strings(all)
	all = slices.Compact(all)
	for _, name := range all {
		d := readDevice(o.SysfsRoot, o.DevRoot, name)
		d.Listed = slices.Contains(r.Library.Devices, name)
		checkDevice(&d, &r)
		r.Devices = append(r.Devices, d)
	}
	for i := range r.Devices {
		explainDevice(&r.Devices[i], &r)
	}
	r.diagnose(names)
	return r
}

// fail records the first failing check. A diagnosis always says what
// device_name asked for, even when the failure came before the devices
// were looked at (no library, no device list).
func (r *Report) fail(c Check, ie *plugins.InitError) {
	if names := strings.TrimSpace(r.DeviceName); names != "" && !strings.Contains(ie.Cause, names) {
		ie.Cause += fmt.Sprintf(" (device_name asked for %s)", names)
	}
	r.Check, r.Diagnosis = c, ie
}

// diagnose picks the first failing check, in the order a person debugging
// the host would look: the library, the device list, the names asked
// for, each device, then the memlock limit.
func (r *Report) diagnose(names []string) {
	lib := r.Library
	switch {
	case lib.Unsupported != "" || !lib.Loaded:
		r.fail(CheckLibrary, diagLibrary(r))
		return
	case !lib.Listed:
		r.fail(CheckDeviceList, diagDeviceList(r))
		return
	case len(lib.Devices) == 0:
		r.fail(CheckNoDevices, diagNoDevices(r))
		return
	}
	explicit := len(names) > 0
	if explicit {
		var unknown []string
		for _, n := range names {
			if r.Device(n) == nil {
				unknown = append(unknown, n)
			}
		}
		if len(unknown) > 0 {
			r.fail(CheckUnknownDevice, diagUnknownDevice(r, unknown))
			return
		}
		r.Selected = names
	} else {
		var efa []string
		for _, d := range r.Devices {
			if d.EFA {
				efa = append(efa, d.Name)
			} else {
				r.Selected = append(r.Selected, d.Name)
			}
		}
		if len(r.Selected) == 0 {
			r.Selected = efa
		} else if len(efa) > 0 {
			r.Notes = append(r.Notes, "skipped AWS EFA devices "+joinNames(efa)+" (use protocol efa for them)")
		}
	}
	var firstBad *Device
	for _, n := range r.Selected {
		d := r.Device(n)
		if d.diag == nil {
			r.Usable = append(r.Usable, n)
		} else if firstBad == nil {
			firstBad = d
		}
	}
	if firstBad != nil && (explicit || len(r.Usable) == 0) {
		r.fail(firstBad.check, firstBad.diag)
		return
	}
	if firstBad != nil {
		for _, n := range r.Selected {
			if d := r.Device(n); d.diag != nil {
				r.Notes = append(r.Notes, "skipped "+d.Name+": "+d.Problem)
			}
		}
	}
	if min := uint64(r.Options.MinMemlock); !r.Memlock.enough(min) {
		r.fail(CheckMemlock, diagMemlock(r))
		return
	}
	if r.Memlock.Err != "" {
		r.Notes = append(r.Notes, "memlock limit not checked: "+r.Memlock.Err)
	} else if r.Memlock.CapIPCLock && !r.Memlock.SoftUnlimited && uint64(r.Options.MinMemlock) > r.Memlock.Soft {
		r.Notes = append(r.Notes, "RLIMIT_MEMLOCK is "+fmtLimit(r.Memlock.Soft, false)+" but the process has CAP_IPC_LOCK, so the limit does not apply")
	}
}

// checkDevice runs the per-device checks and records the first failure on
// the device: sysfs entry, EFA, uverbs device, its node, the library's
// listing, the port, its state, a usable GID. The diagnosis texts are
// built afterwards (explainDevice), once every device is checked, so they
// can name the devices that passed.
func checkDevice(d *Device, r *Report) {
	o := r.Options
	switch {
	case !d.InSysfs:
		d.check = CheckSysfs
	case d.EFA:
		d.check = CheckEFA
	case d.Uverbs == "":
		d.check = CheckNoUverbs
	case d.UverbsErr != nil:
		d.check = CheckUverbsAccess
	case r.Library.Listed && !d.Listed && !r.Library.Truncated:
		// (A truncated list tells nothing about the devices past its
		// cut: they go on to the next checks.)
		d.check = CheckNotListed
	}
	if d.check != "" {
		return
	}
	p := d.port(o.IBPort)
	if p == nil {
		d.check = CheckPortMissing
		return
	}
	d.Port = p.Num
	if !p.Active() {
		d.check = CheckPortNotActive
		return
	}
	g, ok := p.pickGID(o.GIDIndex)
	if !ok {
		d.check = CheckNoGID
		return
	}
	d.GIDIndex, d.GID = g.Index, g
}

// explainDevice builds the diagnosis of a device that failed a check.
func explainDevice(d *Device, r *Report) {
	var ie *plugins.InitError
	switch d.check {
	case "":
		return
	case CheckSysfs:
		ie = diagSysfs(r, d)
	case CheckEFA:
		ie = diagEFA(d)
	case CheckNoUverbs:
		ie = diagNoUverbs(r, d)
	case CheckUverbsAccess:
		ie = diagUverbsAccess(d)
	case CheckNotListed:
		ie = diagNotListed(r, d)
	case CheckPortMissing:
		ie = diagPortMissing(r.Options, d)
	case CheckPortNotActive:
		ie = diagPortNotActive(r, d, d.port(d.Port))
	case CheckNoGID:
		ie = diagNoGID(r.Options, d, d.port(d.Port))
	default:
		ie = newDiag(plugins.StepProbeDevices, fmt.Sprintf("%s failed check %s", d.Name, d.check))
	}
	d.diag, d.Problem = ie, ie.Cause
}

func configError(err error) *plugins.InitError {
	return &plugins.InitError{Transport: Name, Step: plugins.StepConfigure, Cause: trimPrefix(err.Error()), Err: err}
}
