// Package plugins is kvconnect's transport plugin SDK: the Transport
// interface every transport implements, Serve for plugin executables, and
// the host-side launcher that starts a plugin binary and speaks to it over
// gRPC (hashicorp/go-plugin).
//
// Only control messages cross the plugin's gRPC socket. KV bytes live in
// shared-memory regions that the host maps and hands to the plugin by file
// descriptor, so a transport running as a subprocess reads and writes the
// same memory as the host.
package plugins

import (
	"context"
	"fmt"
	"os"

	"go.uber.org/zap"
)

// APIVersion is the version of the Transport interface and its gRPC
// protocol. It is the go-plugin protocol version of the handshake.
const APIVersion = 1

// RegionID names a registered region within one node. 0 is never a valid
// id: in an Op, RemoteRegion 0 means RemoteOffset is an absolute address.
type RegionID uint64

// PeerID is a transport's handle for a connected peer.
type PeerID uint64

// OpKind is the direction of an op. Values match Mooncake's opcodes.
type OpKind uint8

const (
	// OpRead copies remote memory into local memory.
	OpRead OpKind = 0
	// OpWrite copies local memory into remote memory.
	OpWrite OpKind = 1
)

func (k OpKind) String() string {
	switch k {
	case OpRead:
		return "READ"
	case OpWrite:
		return "WRITE"
	}
	return fmt.Sprintf("OpKind(%d)", uint8(k))
}

// Op is one transfer between a local region and a peer's memory.
type Op struct {
	Kind        OpKind
	LocalRegion RegionID
	LocalOffset uint64
	// RemoteRegion is the peer's region id, or 0 when RemoteOffset is an
	// absolute address in the peer's published address space (Mooncake's
	// peer_buffer_address).
	RemoteRegion RegionID
	RemoteOffset uint64
	Length       uint64
}

// OpResult is the outcome of one op: Err is nil when it completed.
// errors.Is(Err, ErrTimeout) / ErrCanceled tell timed-out and canceled ops
// from failed ones.
type OpResult struct {
	Err error
}

// Region is a registered range of shared memory.
type Region struct {
	ID RegionID
	// Addr is the region's base address as published to peers: the
	// host process's virtual address of the mapping.
	Addr uint64
	// Mem is the region's memory as mapped in the calling process.
	Mem []byte
	// File is the shared-memory file backing Mem. The plugin client sends
	// it to the plugin process; transports must not close it.
	File *os.File
	// FileOffset is where Mem starts within File (any alignment).
	FileOffset uint64
}

// RemoteRegion is a peer's region as published in its segment descriptor.
type RemoteRegion struct {
	ID   RegionID
	Addr uint64
	Size uint64
	// Key is the transport-specific data returned by the peer's
	// RegisterRegion (an rkey, a memory key); nil for tcp.
	Key []byte
}

// PeerInfo is what a transport needs to connect to a peer: the peer's
// endpoint for this transport and its regions.
type PeerInfo struct {
	Name     string // the peer's session id, host:port
	Endpoint []byte // from the peer's InitResult.Endpoint
	Regions  []RemoteRegion
}

// Capability flags a transport reports in Info.
type Capability uint32

const (
	CapRead            Capability = 1 << iota // supports OpRead
	CapWrite                                  // supports OpWrite
	CapAbsoluteAddress                        // accepts RemoteRegion 0 with absolute addresses
	CapSameHostOnly                           // only reaches peers on the same host
)

// Info describes a transport.
type Info struct {
	Name         string
	Version      string
	APIVersion   int
	Capabilities Capability
}

// InitRequest carries what Mooncake's initialize() takes, plus the
// transport's own options.
type InitRequest struct {
	Hostname   string // advertised host, optionally host:port:npu_N for ascend
	Metadata   string // "P2PHANDSHAKE" or a metadata service URL
	Protocol   string // the protocol the user asked for
	DeviceName string // device_name as configured (may be empty = auto)
	// Options is the transport's own config subtree as a JSON object.
	Options []byte
	// Logger is where the transport logs; not sent over the wire (a plugin
	// gets a logger that forwards to the host).
	Logger *zap.Logger
}

// InitResult is what a transport publishes once it is up.
type InitResult struct {
	// Endpoint is the opaque address peers pass back in PeerInfo.Endpoint.
	Endpoint []byte
	// Summary describes the endpoint for people: "tcp 127.0.0.1:40123".
	Summary string
}

// Lifecycle is the part of a transport that starts and stops it.
type Lifecycle interface {
	Info(ctx context.Context) (Info, error)
	// Init brings the transport up. A transport that cannot run on this
	// host returns an error wrapping ErrUnavailable, preferably an
	// *InitError.
	Init(ctx context.Context, req InitRequest) (InitResult, error)
	// Close releases everything. It is idempotent.
	Close(ctx context.Context) error
}

// DataPath is the part of a transport that moves bytes.
type DataPath interface {
	// RegisterRegion makes r available to local ops and to peers. The
	// returned key is published to peers in RemoteRegion.Key.
	RegisterRegion(ctx context.Context, r Region) (key []byte, err error)
	// DeregisterRegion waits for ops using the region to finish, then
	// forgets it; after it returns the transport no longer touches r.Mem.
	DeregisterRegion(ctx context.Context, id RegionID) error
	// Connect opens a peer.
	Connect(ctx context.Context, peer PeerInfo) (PeerID, error)
	// Disconnect closes a peer; its ops in flight fail.
	Disconnect(ctx context.Context, id PeerID) error
	// Transfer runs a batch of ops against a peer and fills results, one
	// per op, before it returns. It returns a non-nil error only when the
	// batch as a whole could not run; results then carry that error too.
	Transfer(ctx context.Context, peer PeerID, ops []Op, results []OpResult) error
}

// Transport is what every transport implements, in-process or behind a
// plugin process.
type Transport interface {
	Lifecycle
	DataPath
}

// FillResults sets every result to err. Transports use it when a batch
// fails as a whole.
func FillResults(results []OpResult, err error) {
	for i := range results {
		results[i].Err = err
	}
}
