package rdma

import (
	"context"
	"syscall"
)

// LibibverbsSoname is the library the real loader opens.
const LibibverbsSoname = "libibverbs.so.1"

// Library is what loading libibverbs and asking it for devices found.
type Library struct {
	// Soname is the library asked for, "libibverbs.so.1".
	Soname string
	// Unsupported is set when this build cannot load libraries at all
	// (built without cgo, or not for Linux); it says why.
	Unsupported string
	// Loaded is true when dlopen and the dlsym of the verbs entry points
	// succeeded.
	Loaded bool
	// LoadError is dlerror()'s text when Loaded is false.
	LoadError string
	// Listed is true when ibv_get_device_list returned a list (possibly
	// empty).
	Listed bool
	// ListErrno is the errno ibv_get_device_list set when it returned
	// NULL: ENOSYS (no kernel uverbs support), EPERM, ENOMEM.
	ListErrno syscall.Errno
	// Devices are the names of the devices ibv_get_device_list returned.
	Devices []string
	// Truncated says the list held more names than were read (64 KiB of
	// names): a device past the cut is not in Devices.
	Truncated bool
}

// Loader loads libibverbs and lists its devices. LoadLibibverbs is the
// real one; tests substitute results to reach the checks after it.
type Loader func(ctx context.Context) Library

// LoadLibibverbs opens libibverbs.so.1 with dlopen (the plugin starts even
// where it is not installed), calls ibv_get_device_list, records errno and
// the device names, and frees the list. The library stays loaded.
//
// libibverbs honours SYSFS_PATH from the environment (read once per
// process) in place of /sys when the kernel's RDMA netlink interface is
// absent, as on hosts without RDMA support.
func LoadLibibverbs(ctx context.Context) Library {
	return loadLibrary(LibibverbsSoname)
}
