// Package plugins is kvconnect's transport SDK: what a transport author
// imports, and nothing else. It holds the Transport contract and its
// types, the sentinels and InitError a transport returns, DecodeOptions
// for a transport's options, Guard (the state guard every transport
// needs), and Serve, which runs a transport as a plugin process.
//
// The host side (finding, launching, diagnosing and watching plugin
// processes) lives in package plugins/host, which plugin binaries do not
// link. The region table every memory owner uses to bounds-check incoming
// ops is package plugins/regions; the conformance suite is
// plugins/transporttest. docs/WRITING-A-TRANSPORT.md walks through
// writing one.
//
// Only control messages cross a plugin's gRPC socket. KV bytes live in
// shared-memory regions that the host maps and hands to the plugin by file
// descriptor, so a transport running as a subprocess reads and writes the
// same memory as the host.
package plugins

import (
	"context"
	"fmt"
	"os"

	"go.uber.org/zap"

	"github.com/kvconnect/kvconnect/auth"
	"github.com/kvconnect/kvconnect/internal/pluginrpc"
)

// APIVersion is the version of the Transport contract and of its gRPC
// protocol (the go-plugin protocol version of the handshake). A transport
// reports it in Info.
const APIVersion = pluginrpc.ProtocolVersion

// MaxBatchOps bounds the ops of one Transfer, in-process and through a
// plugin alike.
const MaxBatchOps = pluginrpc.MaxOps

// MaxBatchRegions bounds the regions of one RegisterRegions call.
const MaxBatchRegions = 1 << 14

// RegionID names a registered region within one node. 0 is never a valid
// id: in an Op, RemoteRegion 0 means RemoteOffset is an absolute address
// (and LocalRegion 0 that LocalOffset is one).
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
	Kind OpKind
	// LocalRegion is a region registered with this transport, or 0 when
	// LocalOffset is an absolute address inside one.
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
	// CapAuthenticates: with InitRequest.Auth set, the transport runs the
	// auth exchange on every data connection it opens and accepts, before
	// serving anything on it. The host warns about (and Status shows) a
	// transport without it on a node with auth on.
	CapAuthenticates
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
	// BindAddress is the local address the node listens on ("" = every
	// interface): a transport that listens binds the same address.
	BindAddress string
	// Options is the transport's own config subtree as a JSON object
	// (decode it with DecodeOptions); nil or empty when none is set.
	Options []byte
	// Auth is the node's keyring (nil = authentication off). A transport
	// that controls its wire (CapAuthenticates) proves itself with it on
	// every data connection it opens (Keyring.Prove) and requires it on
	// every one it accepts (Keyring.Accept), before reading anything else.
	// Never log its secrets (auth.Secret prints as "<redacted>").
	Auth *auth.Keyring
	// Logger is where the transport logs. It may be nil: log nowhere then
	// (zap.NewNop). It does not cross the wire: a plugin gets a logger that
	// forwards to the host's.
	Logger *zap.Logger
}

// InitResult is what a transport publishes once it is up.
type InitResult struct {
	// Endpoint is the opaque address peers pass back in PeerInfo.Endpoint.
	Endpoint []byte
	// Summary describes the endpoint for people: "tcp 127.0.0.1:40123".
	Summary string
}

// Transport is what every transport implements, in-process or behind a
// plugin process. The host drives it in this order:
//
//  1. Info, at any time, even before Init and after Close.
//  2. Init, once. A transport that cannot run on this host returns an
//     error wrapping ErrUnavailable, preferably an *InitError; the host
//     then tries the next transport of its fallback chain. A second Init
//     after one that succeeded fails with ErrInvalidArgument (Guard allows
//     another try after one that failed), Init after Close with ErrClosed.
//  3. RegisterRegion, DeregisterRegion, Connect, Disconnect and Transfer,
//     any number of times, from many goroutines at once. Before Init they
//     fail with ErrNotInitialized, after Close with ErrClosed.
//  4. Close, once or more, possibly while other calls are in flight.
//
// Concurrency: every method may be called concurrently with every other,
// including several Transfers on the same peer; a transport does its own
// locking. Errors wrap the package's sentinels (with %w) so the host can
// tell them apart with errors.Is.
//
// The owner's duty: a transport serves peers' ops on its registered
// regions. Before it touches memory for an incoming op it must check that
// [offset, offset+length) lies inside one region registered with it (by id,
// or by absolute address when the region id is 0), and refuse the op with
// ErrOutOfBounds or ErrUnknownRegion otherwise, touching nothing. The
// region table in plugins/regions does exactly that; use it.
type Transport interface {
	Lifecycle
	DataPath
}

// Lifecycle is the part of a transport that starts and stops it.
type Lifecycle interface {
	// Info describes the transport. It may be called at any time; the
	// capabilities it reports after Init may depend on what Init selected.
	Info(ctx context.Context) (Info, error)
	// Init brings the transport up: it parses req.Options, probes devices,
	// binds listeners and returns the endpoint peers will connect to. It
	// is bounded by ctx.
	Init(ctx context.Context, req InitRequest) (InitResult, error)
	// Close releases everything: ops in flight fail with ErrClosed, peers
	// are disconnected, listeners and goroutines stop, and no region's
	// memory is touched once it returns. It is idempotent and bounded by
	// ctx.
	Close(ctx context.Context) error
}

// DataPath is the part of a transport that moves bytes.
type DataPath interface {
	// RegisterRegion makes r available to local ops and to peers. Region
	// ids are unique and address ranges may not overlap: a duplicate id or
	// an overlapping range fails with ErrInvalidArgument. The returned key
	// is published to peers in RemoteRegion.Key.
	RegisterRegion(ctx context.Context, r Region) (key []byte, err error)
	// DeregisterRegion waits for ops using the region (local ones and
	// peers' ones being served) to finish, then forgets it; after it
	// returns the transport no longer touches r.Mem. An unknown id fails
	// with ErrUnknownRegion. If ctx ends first it returns the context's
	// error (ErrTimeout or ErrCanceled): the region is no longer reachable
	// but may still be in use, and a later call waits again.
	DeregisterRegion(ctx context.Context, id RegionID) error
	// Connect opens a peer.
	Connect(ctx context.Context, peer PeerInfo) (PeerID, error)
	// Disconnect closes a peer; its ops in flight fail.
	Disconnect(ctx context.Context, id PeerID) error
	// Transfer runs a batch of ops against a peer and fills results, one
	// per op, before it returns; it does not touch results afterwards. It
	// returns soon after ctx ends, failing the ops still running with
	// ErrTimeout or ErrCanceled. It returns a non-nil error only when the
	// batch as a whole could not run; results then carry that error too.
	Transfer(ctx context.Context, peer PeerID, ops []Op, results []OpResult) error
}

// BatchRegistrar is an optional capability of a Transport: registering
// and deregistering many regions in one call, which the host's plugin
// client implements with one round trip to the plugin for many regions.
// The connector uses it where regions come in bulk (a batch
// registration, a plugin restart).
//
// RegisterRegions registers every region or none: on failure it leaves
// none of them registered and names the one that failed. It returns one
// key per region, in order. DeregisterRegions tries every id and returns
// the first failure. Both are safe for concurrent use, like every
// Transport method.
type BatchRegistrar interface {
	RegisterRegions(ctx context.Context, rs []Region) (keys [][]byte, err error)
	DeregisterRegions(ctx context.Context, ids []RegionID) error
}

// FillResults sets every result to err. Transports use it when a batch
// fails as a whole.
func FillResults(results []OpResult, err error) {
	for i := range results {
		results[i].Err = err
	}
}
