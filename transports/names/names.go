// Package names holds the names of the transports kvconnect ships, as
// configurations, descriptors and plugin binaries (kvconnect-transport-
// <name>) spell them. It is a leaf: configuration checks names against it
// without linking any transport or the plugin launcher, and each
// transport's Name constant is the one here.
package names

// The built-in transports.
const (
	RDMA   = "rdma"
	UCX    = "ucx"
	EFA    = "efa"
	Ascend = "ascend"
	TCP    = "tcp"
)

// Builtin lists the built-in transports in the order kvconnect doctor
// lists them (transports.Builtin keeps the same order).
func Builtin() []string { return []string{RDMA, UCX, EFA, Ascend, TCP} }
