// Package transports is the catalog of kvconnect's transports: one
// Registration per transport (its name, what it needs, its default
// fallback chain and, optionally, an in-process factory). The connector's
// fallback chain, probing, kvconnect doctor and the CLI read the same
// Catalog; configuration checks names against it through the small
// interface it needs (config.TransportCatalog). A transport the catalog
// does not know (a third party's) is still usable by name: its plugin
// binary, kvconnect-transport-<name>, is looked for on disk.
//
// The catalog links no transport: Builtin has no factories, and whoever
// runs a transport in-process adds one with WithFactory (the connector
// adds tcp's), so importing this package costs no transport code and no
// cgo.
//
// A Catalog is immutable and safe for concurrent use; With returns a new
// one with entries added or replaced.
package transports

import (
	"slices"

	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/transports/names"
)

// Registration describes one transport.
type Registration struct {
	// Name is the transport's name in configs, descriptors and its plugin
	// binary (kvconnect-transport-<Name>).
	Name string
	// Summary says in a line what the transport is.
	Summary string
	// Needs says what the host must have for the transport to start
	// ("" = nothing beyond the operating system).
	Needs string
	// Fallback is the chain tried after this transport when the config
	// leaves fallback unset (docs/FALLBACK.md says why).
	Fallback []string
	// New makes the transport inside the calling process. nil means it
	// runs only as a plugin process. Builtin has none: the connector adds
	// tcp's, and an embedder that wants a native transport (rdma, ucx,
	// efa, ascend) in-process adds one with WithFactory and their
	// package's New, so that embedding the connector links no cgo.
	New func() plugins.Transport
}

// Catalog is an ordered set of registrations.
type Catalog struct {
	regs []Registration
}

// defaultFallback is the chain after a transport the catalog does not know.
var defaultFallback = []string{names.TCP}

// Builtin returns the catalog of the transports kvconnect ships, in the
// order doctor lists them (names.Builtin), without in-process factories.
func Builtin() *Catalog {
	tcp := []string{names.TCP}
	return &Catalog{regs: []Registration{
		{Name: names.RDMA, Summary: "InfiniBand / RoCE through UCX's RDMA lanes, after a preflight of the host",
			Needs: "an RDMA NIC, libibverbs and UCX", Fallback: tcp},
		{Name: names.UCX, Summary: "UCX one-sided RMA over the lanes UCX selects (shared memory, tcp, RDMA)",
			Needs: "UCX (libucp)", Fallback: tcp},
		{Name: names.EFA, Summary: "AWS Elastic Fabric Adapter through libfabric RDM endpoints",
			Needs: "an EFA device and libfabric", Fallback: tcp},
		{Name: names.Ascend, Summary: "Huawei Ascend NPUs (host probe and host:port:npu_N addressing; no NPU data path yet)",
			Needs: "an Ascend NPU, its driver and CANN", Fallback: tcp},
		{Name: names.TCP, Summary: "pure-Go TCP, several connections per peer; speaks Mooncake's TCP protocol too; the last fallback",
			Fallback: []string{}},
	}}
}

// Lookup returns the registration of name.
func (c *Catalog) Lookup(name string) (Registration, bool) {
	for _, r := range c.regs {
		if r.Name == name {
			return clone(r), true
		}
	}
	return Registration{}, false
}

// Names lists the transports in catalog order.
func (c *Catalog) Names() []string {
	out := make([]string, len(c.regs))
	for i, r := range c.regs {
		out[i] = r.Name
	}
	return out
}

// Registrations lists every registration in catalog order.
func (c *Catalog) Registrations() []Registration {
	out := make([]Registration, len(c.regs))
	for i, r := range c.regs {
		out[i] = clone(r)
	}
	return out
}

// Fallback is the default chain after protocol: its registration's, or
// tcp for a transport the catalog does not know.
func (c *Catalog) Fallback(protocol string) []string {
	if r, ok := c.Lookup(protocol); ok && r.Fallback != nil {
		return r.Fallback
	}
	return slices.Clone(defaultFallback)
}

// Chain is the ordered list of transports to try: protocol, then each
// entry of fallback, each once. A nil fallback means the default chain
// for protocol; an empty non-nil one is strict mode (protocol only).
func (c *Catalog) Chain(protocol string, fallback []string) []string {
	if fallback == nil {
		fallback = c.Fallback(protocol)
	}
	out := []string{protocol}
	for _, name := range fallback {
		if !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	return out
}

// With returns a catalog with regs added, each replacing any registration
// of the same name (in its place) or appended.
func (c *Catalog) With(regs ...Registration) *Catalog {
	out := &Catalog{regs: c.Registrations()}
	for _, r := range regs {
		r = clone(r)
		if i := slices.IndexFunc(out.regs, func(o Registration) bool { return o.Name == r.Name }); i >= 0 {
			out.regs[i] = r
		} else {
			out.regs = append(out.regs, r)
		}
	}
	return out
}

// WithFactory returns a catalog in which name's transport can run
// in-process, made by newT; the rest of its registration is kept (or, for
// a name the catalog does not know, a registration with the default
// fallback is added).
func (c *Catalog) WithFactory(name string, newT func() plugins.Transport) *Catalog {
	r, ok := c.Lookup(name)
	if !ok {
		r = Registration{Name: name, Fallback: slices.Clone(defaultFallback)}
	}
	r.New = newT
	return c.With(r)
}

func clone(r Registration) Registration {
	if r.Fallback != nil {
		r.Fallback = slices.Clone(r.Fallback)
	}
	return r
}
