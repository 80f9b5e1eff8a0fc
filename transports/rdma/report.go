package rdma

import (
	"fmt"
	"strings"
)

// summary is one line about the device for people and logs.
func (d *Device) summary() string {
	var b strings.Builder
	if !d.InSysfs {
		b.WriteString("not in sysfs")
	} else {
		fmt.Fprintf(&b, "node type %q", d.NodeType)
		if d.Driver != "" {
			fmt.Fprintf(&b, ", driver %s", d.Driver)
		}
		if d.HCAType != "" {
			fmt.Fprintf(&b, ", %s", d.HCAType)
		}
		if d.FWVersion != "" {
			fmt.Fprintf(&b, ", fw %s", d.FWVersion)
		}
		if len(d.NetDevs) > 0 {
			fmt.Fprintf(&b, ", netdev %s", joinNames(d.NetDevs))
		}
	}
	switch {
	case d.Uverbs == "":
		b.WriteString("; no uverbs device")
	case d.UverbsErr != nil:
		fmt.Fprintf(&b, "; %s: %v", d.Uverbs, d.UverbsErr)
	default:
		fmt.Fprintf(&b, "; %s ok", d.UverbsPath)
	}
	if d.Listed {
		b.WriteString("; listed by libibverbs")
	}
	return b.String()
}

// String formats the report for people, one fact a line: the library,
// every device with its ports and GIDs, the memlock limit, notes, and the
// verdict with its hints.
func (r Report) String() string {
	var b strings.Builder
	lib := r.Library
	switch {
	case lib.Unsupported != "":
		fmt.Fprintf(&b, "libibverbs: not loadable: %s\n", lib.Unsupported)
	case !lib.Loaded:
		fmt.Fprintf(&b, "libibverbs: not loaded: %s\n", lib.LoadError)
	case !lib.Listed:
		fmt.Fprintf(&b, "libibverbs: loaded; ibv_get_device_list failed: %s (%s)\n", errnoName(lib.ListErrno), lib.ListErrno)
	default:
		fmt.Fprintf(&b, "libibverbs: loaded; %d device(s): %s\n", len(lib.Devices), orNone(joinNames(lib.Devices)))
	}
	fmt.Fprintf(&b, "sysfs %s: uverbs ABI %s; devices: %s\n", r.Options.SysfsRoot, orNone(r.UverbsABI), orNone(joinNames(r.SysfsDevices)))
	for i := range r.Devices {
		d := &r.Devices[i]
		fmt.Fprintf(&b, "device %s: %s\n", d.Name, d.summary())
		for _, p := range d.Ports {
			fmt.Fprintf(&b, "  port %d: state %q, phys %q, %s, lid %s, rate %q, %d GID entries\n",
				p.Num, p.State.String(), p.PhysState.String(), orNone(p.LinkLayer), orNone(p.LID), p.Rate, p.GIDTableLen)
			for _, g := range p.GIDs {
				fmt.Fprintf(&b, "    gid %s\n", g)
			}
			for _, e := range p.Errors {
				fmt.Fprintf(&b, "    error: %s\n", e)
			}
		}
		for _, e := range d.Errors {
			fmt.Fprintf(&b, "  error: %s\n", e)
		}
		if d.Problem != "" {
			fmt.Fprintf(&b, "  problem: %s\n", d.Problem)
		}
	}
	fmt.Fprintf(&b, "memlock: %s\n", r.Memlock)
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	if r.Diagnosis == nil {
		fmt.Fprintf(&b, "verdict: ok, usable: %s\n", joinNames(r.Usable))
		for _, n := range r.Usable {
			if d := r.Device(n); d != nil {
				fmt.Fprintf(&b, "  %s: port %d, GID %s\n", d.Name, d.Port, d.GID)
			}
		}
	} else {
		fmt.Fprintf(&b, "verdict: %s: %v\n", r.Check, r.Diagnosis)
		for _, h := range r.Diagnosis.Hints {
			fmt.Fprintf(&b, "  hint: %s\n", h)
		}
	}
	return b.String()
}
