package connector

import (
	"encoding/json"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/kvconnect/kvconnect/plugins/regions"
	"github.com/kvconnect/kvconnect/transports/tcp"
)

// SegmentDescriptor is what a node publishes about itself: the answer to a
// Metadata handshake request, and what it stores in a metadata service.
// It is Mooncake's TCP segment descriptor, so an unmodified Mooncake
// Transfer Engine can read it, with kvconnect's own fields under
// "kvconnect", which Mooncake ignores. A descriptor without them is a
// Mooncake node's.
type SegmentDescriptor struct {
	// Name is the node's session id, host:rpc_port. A Mooncake peer dials
	// the data port on this host and sends notifies to it, so it must be
	// reachable.
	Name string `json:"name"`
	// Protocol is Mooncake's: "tcp" when the node serves Mooncake's TCP
	// data protocol on TCPDataPort; "kvconnect" when it does not (no
	// Mooncake transport has that name, so a Mooncake peer says it cannot
	// use it).
	Protocol string `json:"protocol"`
	// TCPDataPort and TCPProtoVersion are Mooncake's tcp_data_port and
	// tcp_proto_version (JSON numbers: Mooncake aborts on strings).
	TCPDataPort     int    `json:"tcp_data_port,omitempty"`
	TCPProtoVersion int    `json:"tcp_proto_version,omitempty"`
	Timestamp       string `json:"timestamp"`
	// Buffers are the registered regions, in address order.
	Buffers []BufferDescriptor `json:"buffers"`
	// KVConnect is set by kvconnect nodes.
	KVConnect *NodeDescriptor `json:"kvconnect,omitempty"`
	// Devices are an RDMA Mooncake node's NICs, read only to say why it
	// cannot be reached.
	Devices []MooncakeDevice `json:"devices,omitempty"`
}

// NodeDescriptor is the kvconnect part of a segment descriptor.
type NodeDescriptor struct {
	Version int `json:"version"`
	// Protocol is the node's preferred transport.
	Protocol   string              `json:"protocol"`
	Transports []TransportEndpoint `json:"transports"`
	// HostID identifies the host (boot id) and the namespaces shared
	// memory needs; peers with the same HostID may use transports that
	// only reach the same host.
	HostID string `json:"host_id,omitempty"`
}

// TransportEndpoint is one transport a node has up.
type TransportEndpoint struct {
	Name     string `json:"name"`
	Endpoint []byte `json:"endpoint"` // opaque to the connector
	Summary  string `json:"summary,omitempty"`
}

// BufferDescriptor is one registered region, as Mooncake lists buffers.
type BufferDescriptor struct {
	// Name is the owning segment's name (Mooncake's rule: never empty).
	Name   string `json:"name"`
	Addr   uint64 `json:"addr"`
	Length uint64 `json:"length"`
	// ID is kvconnect's region id. A Mooncake node's buffers have none:
	// decoding numbers them from 1 in address order.
	ID   uint64            `json:"id,omitempty"`
	Keys map[string][]byte `json:"keys,omitempty"` // per transport
}

// MooncakeDevice is an RDMA NIC a Mooncake node publishes.
type MooncakeDevice struct {
	Name string `json:"name"`
	LID  int    `json:"lid"`
	GID  string `json:"gid"`
}

// protocolKVConnect is the Mooncake protocol of a node that serves no
// Mooncake TCP peers.
const protocolKVConnect = "kvconnect"

// descriptorVersion is the kvconnect descriptor format version.
const descriptorVersion = 2

// mooncakeTimestamp is the layout of Mooncake's descriptor timestamps.
const mooncakeTimestamp = "2006-01-02 15:04:05.000000"

// IsMooncake reports whether the descriptor is an unmodified Mooncake
// node's.
func (d *SegmentDescriptor) IsMooncake() bool { return d.KVConnect == nil }

// descriptor builds this node's segment descriptor.
func (c *Connector) descriptor() SegmentDescriptor {
	c.mu.Lock()
	defer c.mu.Unlock()
	node := &NodeDescriptor{Version: descriptorVersion, Protocol: c.transports[0].name, HostID: c.hostID}
	d := SegmentDescriptor{
		Name: c.session, Protocol: protocolKVConnect, KVConnect: node,
		Timestamp: time.Now().UTC().Format(mooncakeTimestamp),
		Buffers:   make([]BufferDescriptor, 0, len(c.regions)),
	}
	for _, at := range c.transports {
		if at.crashed != nil {
			continue
		}
		node.Transports = append(node.Transports, TransportEndpoint{Name: at.name, Endpoint: at.res.Endpoint, Summary: at.res.Summary})
		if at.name == "tcp" && c.mooncake() {
			if port := endpointPort(at.res.Endpoint); port > 0 {
				d.Protocol, d.TCPDataPort, d.TCPProtoVersion = "tcp", port, 2
			}
		}
	}
	for _, r := range c.regions {
		b := BufferDescriptor{Name: c.session, ID: uint64(r.id), Addr: r.addr, Length: uint64(len(r.mem))}
		for name, key := range r.keys {
			if len(key) > 0 {
				if b.Keys == nil {
					b.Keys = map[string][]byte{}
				}
				b.Keys[name] = key
			}
		}
		d.Buffers = append(d.Buffers, b)
	}
	// Mooncake's bench and validator address the first buffer: the
	// lowest address comes first, as in an index.
	sort.Slice(d.Buffers, func(i, j int) bool { return d.Buffers[i].Addr < d.Buffers[j].Addr })
	return d
}

// mooncake reports whether Mooncake interop is on.
func (c *Connector) mooncake() bool { return c.cfg.MooncakeInterop == nil || *c.cfg.MooncakeInterop }

// endpointPort is the port of a host:port endpoint, or 0.
func endpointPort(ep []byte) int {
	_, p, err := net.SplitHostPort(string(ep))
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(p)
	return n
}

// decodeDescriptor parses and checks a descriptor received from a peer
// (kvconnect's or Mooncake's), and indexes its buffers. A Mooncake node's
// buffers are numbered from 1 in address order.
func decodeDescriptor(body []byte) (SegmentDescriptor, *regions.Index[BufferDescriptor], error) {
	var d SegmentDescriptor
	if err := json.Unmarshal(body, &d); err != nil {
		return d, nil, fmt.Errorf("connector: malformed segment descriptor: %v: %w", err, ErrProtocol)
	}
	if d.Name == "" {
		return d, nil, fmt.Errorf("connector: segment descriptor without a name: %w", ErrProtocol)
	}
	if d.IsMooncake() {
		// Mooncake's own rule: a buffer without a name, an address or a
		// length makes the whole descriptor corrupted.
		for i, b := range d.Buffers {
			if b.Name == "" || b.Addr == 0 || b.Length == 0 {
				return d, nil, fmt.Errorf("connector: Mooncake segment descriptor %s: buffer %d has name %q, addr 0x%x, length %d (each needs all three): %w",
					d.Name, i, b.Name, b.Addr, b.Length, ErrProtocol)
			}
		}
		sort.Slice(d.Buffers, func(i, j int) bool { return d.Buffers[i].Addr < d.Buffers[j].Addr })
		for i := range d.Buffers {
			d.Buffers[i].ID = uint64(i + 1)
		}
	}
	x, err := d.index()
	if err != nil {
		return d, nil, err
	}
	return d, x, nil
}

func bufferSpan(b BufferDescriptor) regions.Span {
	return regions.Span{ID: b.ID, Addr: b.Addr, Size: b.Length}
}

// index is the lookup of d's buffers by id and address; it refuses
// buffers with id 0, no length, ranges that wrap or overlap, and
// duplicate ids, as the peer's protocol error.
func (d *SegmentDescriptor) index() (*regions.Index[BufferDescriptor], error) {
	x, err := regions.NewIndex(d.Buffers, bufferSpan)
	if err != nil {
		return nil, fmt.Errorf("connector: segment descriptor %s: bad buffer list: %v: %w", d.Name, err, ErrProtocol)
	}
	return x, nil
}

// transports lists the transports the peer has up, as this node can
// reach them: a kvconnect node's as it published them; a Mooncake node's
// tcp data port as a Mooncake endpoint of the tcp transport (host from
// its name, as Mooncake dials it), or nothing when it serves no TCP.
func (d *SegmentDescriptor) transports(session string) []TransportEndpoint {
	if !d.IsMooncake() {
		return d.KVConnect.Transports
	}
	if d.Protocol != "tcp" || d.TCPDataPort <= 0 {
		return nil
	}
	host, _, err := net.SplitHostPort(d.Name)
	if err != nil || host == "" || host == "0.0.0.0" || host == "::" {
		host, _, _ = net.SplitHostPort(session)
	}
	version := d.TCPProtoVersion
	if version == 0 {
		version = 1 // Mooncake's default when the field is absent
	}
	ep := tcp.MooncakeEndpoint(host, d.TCPDataPort, version)
	return []TransportEndpoint{{Name: "tcp", Endpoint: ep, Summary: fmt.Sprintf("Mooncake TCP data protocol v%d at %s", version, net.JoinHostPort(host, strconv.Itoa(d.TCPDataPort)))}}
}

// mooncakeNotReachable explains why a Mooncake node cannot be reached:
// it publishes no TCP transport (Mooncake's NotSupportedTransport).
func (d *SegmentDescriptor) mooncakeNotReachable(session string) error {
	what := fmt.Sprintf("protocol %q", d.Protocol)
	if len(d.Devices) > 0 {
		names := make([]string, len(d.Devices))
		for i, dev := range d.Devices {
			names[i] = dev.Name
		}
		what += " on devices " + strings.Join(names, ", ")
	}
	return fmt.Errorf("connector: peer %s is a Mooncake Transfer Engine node that publishes %s and no tcp transport: kvconnect reaches Mooncake nodes over Mooncake's TCP transport only; start that node with protocol tcp (MC_FORCE_TCP=1, or --protocol=tcp) (Mooncake's NotSupportedTransport): %w",
		session, what, ErrNoCommonTransport)
}
