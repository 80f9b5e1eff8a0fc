package connector

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/kvconnect/kvconnect/plugins/regions"
)

// descriptor builds this node's segment descriptor.
func (c *Connector) descriptor() SegmentDescriptor {
	c.mu.Lock()
	defer c.mu.Unlock()
	d := SegmentDescriptor{
		Name: c.session, Protocol: c.transports[0].name, Version: descriptorVersion, HostID: c.hostID,
		Timestamp: time.Now().UTC().Format(time.RFC3339Nano),
		Buffers:   make([]BufferDescriptor, 0, len(c.regions)),
	}
	for _, at := range c.transports {
		if at.crashed == nil {
			d.Transports = append(d.Transports, TransportEndpoint{Name: at.name, Endpoint: at.res.Endpoint, Summary: at.res.Summary})
		}
	}
	for _, r := range c.regions {
		b := BufferDescriptor{ID: uint64(r.id), Name: r.name, Addr: r.addr, Length: uint64(len(r.mem))}
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
	return d
}

// SegmentDescriptor is what a node publishes about itself.
type SegmentDescriptor struct {
	Name       string              `json:"name"`     // session id, host:port
	Protocol   string              `json:"protocol"` // the transport this node has up
	Transports []TransportEndpoint `json:"transports"`
	Buffers    []BufferDescriptor  `json:"buffers"`
	Timestamp  string              `json:"timestamp"`
	Version    int                 `json:"version"`
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
	ID     uint64            `json:"id"`
	Name   string            `json:"name,omitempty"`
	Addr   uint64            `json:"addr"`
	Length uint64            `json:"length"`
	Keys   map[string][]byte `json:"keys,omitempty"` // per transport
}

// descriptorVersion is the SegmentDescriptor format version.
const descriptorVersion = 1

// decodeDescriptor parses and checks a descriptor received from a peer,
// and indexes its buffers.
func decodeDescriptor(body []byte) (SegmentDescriptor, *regions.Index[BufferDescriptor], error) {
	var d SegmentDescriptor
	if err := json.Unmarshal(body, &d); err != nil {
		return d, nil, fmt.Errorf("connector: malformed segment descriptor: %v: %w", err, ErrProtocol)
	}
	if d.Name == "" {
		return d, nil, fmt.Errorf("connector: segment descriptor without a name: %w", ErrProtocol)
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
