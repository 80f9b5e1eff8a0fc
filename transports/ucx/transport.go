// Package ucx is kvconnect's UCX transport: one-sided PUT and GET into
// peers' registered memory over whatever lanes UCX selects: shared memory
// (posix, sysv, cma) between processes of one host, tcp between hosts, and
// RDMA (rc, ud, dc) where a NIC exists.
//
// libucp is loaded with dlopen at run time (cgo, Linux only; other builds
// report it unavailable), so the plugin starts on hosts without UCX and
// says what is missing. The data path, its threading model and its memory
// safety rules are those of transports/internal/ucxpath, which the rdma
// transport shares. docs/UCX.md says what was verified and the UCX bugs
// worked around.
package ucx

import (
	"github.com/kvconnect/kvconnect/transports/internal/ucxpath"
	"github.com/kvconnect/kvconnect/transports/names"
)

// Name is the transport's name in configs and descriptors.
const Name = names.UCX

// Version is the transport implementation's version.
const Version = "0.1.0"

// Transport is the UCX transport. Create it with New.
type Transport = ucxpath.Transport

// Options is the transport's config subtree (transports.ucx).
type Options = ucxpath.Options

// New returns a UCX transport. It does nothing until Init.
func New() *Transport { return ucxpath.New(ucxpath.Variant{Name: Name, Version: Version}) }

// DefaultOptions are the options used for keys the config leaves out.
func DefaultOptions() Options { return ucxpath.DefaultOptions() }

// NetDevicesFromDeviceName maps a device_name setting ("mlx5_0,mlx5_1")
// to UCX's net devices ("mlx5_0:1,mlx5_1:1").
func NetDevicesFromDeviceName(deviceName string) string {
	return ucxpath.NetDevicesFromDeviceName(deviceName)
}
