// Package ring is the shared-memory data path between a kvconnect host
// and a transport plugin process: a submission queue (SQ) the host
// writes batches and cancellations to, a completion queue (CQ) the plugin
// writes outcomes to, and an arena holding each batch's ops, its failed
// ops' records and their messages. Both processes map one sealed memfd;
// they wait for each other by spinning briefly, then sleeping on a futex
// in the same memory. gRPC (package pluginrpc) keeps the lifecycle.
//
// This package is the layout, the codec and the waiting; it trusts
// nothing it reads from the other side: every index, count, offset and
// length is checked before use, and each shared value is read once. The
// host side (plugins/host) and the plugin side (plugins) build on it.
// docs/DATAPATH.md describes the protocol for implementers.
package ring

import (
	"encoding/binary"
	"fmt"
	"math/bits"

	"github.com/kvconnect/kvconnect/errdefs"
	"github.com/kvconnect/kvconnect/internal/pluginrpc"
)

// Magic is the first 8 bytes of a ring file ("KVCRING1").
const Magic uint64 = 0x31474e495243564b

// Version is the ring protocol version in the header.
//
// Version 2 added SQBusy and SQKick: the plugin's SQ sleeper runs a lone
// batch itself, and a host that submits meanwhile wakes the plugin's
// standby through SQKick. SQBell came later within version 2: only a
// ring opened with a doorbell (pluginrpc.FeatureDoorbell) uses it, and
// neither side of one opened without reads or writes it.
const Version = 2

// HeaderSize is the size of the header page.
const HeaderSize = 4096

// Offsets in the header. Each word one side writes often sits on a cache
// line of its own.
const (
	offMagic      = 0  // u64 Magic
	offVersion    = 8  // u32 Version
	offHeaderSize = 12 // u32 HeaderSize
	offSQEntries  = 16 // u32
	offCQEntries  = 20 // u32
	offSlotSize   = 24 // u32
	offArenaSlots = 28 // u32

	offSQTail = 64  // u32, host: submissions published
	offSQHead = 128 // u32, plugin: submissions consumed
	offSQIdle = 192 // u32, plugin: 1 while its SQ sleeper sleeps (or is about to)
	offSQSpin = 196 // u32, plugin: goroutines spinning on the SQ
	offSQBusy = 200 // u32, plugin: 1 while its SQ sleeper runs a batch itself
	offSQBell = 204 // u32, plugin: 1 while its SQ sleeper waits on the doorbell (or is about to)
	offCQTail = 256 // u32, plugin: completions published
	offCQHead = 320 // u32, host: completions consumed
	offCQIdle = 384 // u32, host: 1 while its CQ poller sleeps (or is about to)
	offHost   = 448 // u32, host state: 1 = closing
	offPlugin = 512 // u32, plugin state: 1 = serving, 2 = stopped
	offSQKick = 576 // u32, host: bumped to wake the plugin's standby while its sleeper is busy
)

// Host and plugin states.
const (
	HostClosing    = 1
	PluginServing  = 1
	PluginStopped  = 2
	maxSQEntries   = 1 << 16
	maxArenaSlots  = 1 << 16
	minSlotSize    = 1024
	maxSlotSize    = 1 << 20
	maxArenaBytes  = 1 << 30
	defaultEntries = 1024
)

// SubSize and CompSize are the sizes of an SQ and a CQ entry.
const (
	SubSize  = 64
	CompSize = 32
)

// Submission kinds.
const (
	OpBatch  = 1 // run a batch
	OpCancel = 2 // cancel a batch in flight
)

// Completion flags.
const (
	FlagBatchError = 1 << 0 // BatchKinds/BatchMsg describe a batch-level error
)

// NoMsg is a message reference that names no message.
const NoMsg = ^uint32(0)

// MaxMessage bounds one error message in the arena.
const MaxMessage = 1024

// MaxKinds is the number of sentinel kinds a ring can carry (bits of a
// kinds mask).
const MaxKinds = 32

// RecordSize is the size of one failed op's record: index, kinds mask,
// message reference, each u32.
const RecordSize = 12

// Layout is the geometry of a ring file: the host chooses it, writes it
// into the header and names it in the setup RPC; the plugin checks that
// the two agree and fit the file.
type Layout struct {
	SQEntries  uint32 // power of two
	CQEntries  uint32 // power of two; also the host's bound on batches in flight
	SlotSize   uint32 // arena allocation unit, a multiple of 64
	ArenaSlots uint32
}

// DefaultLayout holds 1024 batches in flight and a 16 MiB arena, room for
// a batch of pluginrpc.MaxOps ops beside many small ones.
func DefaultLayout() Layout {
	return Layout{SQEntries: 2 * defaultEntries, CQEntries: defaultEntries, SlotSize: 4096, ArenaSlots: 4096}
}

// Validate checks l's fields.
func (l Layout) Validate() error {
	switch {
	case l.SQEntries == 0 || l.SQEntries > maxSQEntries || bits.OnesCount32(l.SQEntries) != 1:
		return fmt.Errorf("ring: %d SQ entries: want a power of two up to %d: %w", l.SQEntries, maxSQEntries, errdefs.ErrInvalidArgument)
	case l.CQEntries == 0 || l.CQEntries > l.SQEntries/2 || bits.OnesCount32(l.CQEntries) != 1:
		return fmt.Errorf("ring: %d CQ entries: want a power of two up to half the SQ's %d: %w", l.CQEntries, l.SQEntries, errdefs.ErrInvalidArgument)
	case l.SlotSize < minSlotSize || l.SlotSize > maxSlotSize || l.SlotSize%64 != 0:
		return fmt.Errorf("ring: slot size %d: want a multiple of 64 from %d to %d: %w", l.SlotSize, minSlotSize, maxSlotSize, errdefs.ErrInvalidArgument)
	case l.ArenaSlots == 0 || l.ArenaSlots > maxArenaSlots || uint64(l.ArenaSlots)*uint64(l.SlotSize) > maxArenaBytes:
		return fmt.Errorf("ring: %d arena slots of %d bytes: too many: %w", l.ArenaSlots, l.SlotSize, errdefs.ErrInvalidArgument)
	}
	return nil
}

// SQOffset, CQOffset and ArenaOffset are where each part starts in the
// file; Size is the file's size.
func (l Layout) SQOffset() int    { return HeaderSize }
func (l Layout) CQOffset() int    { return l.SQOffset() + int(l.SQEntries)*SubSize }
func (l Layout) ArenaOffset() int { return align(l.CQOffset()+int(l.CQEntries)*CompSize, 4096) }
func (l Layout) ArenaSize() int   { return int(l.ArenaSlots) * int(l.SlotSize) }
func (l Layout) Size() int        { return l.ArenaOffset() + l.ArenaSize() }

// MaxOps is the largest batch l's arena holds.
func (l Layout) MaxOps() int {
	n := min(pluginrpc.MaxOps, l.ArenaSize()/(pluginrpc.OpRecordSize+RecordSize))
	for n > 0 && AreaSize(n) > l.ArenaSize() {
		n = n * 15 / 16
	}
	return n
}

func align(n, a int) int { return (n + a - 1) / a * a }

// Batch area: a batch of n ops occupies AreaSize(n) bytes of the arena,
// laid out as n op records (pluginrpc's 41-byte records, written by the
// host), then room for n failed-op records (written by the plugin, only
// as many as failed), then a message area of msgAreaSize(n) bytes
// (written by the plugin: messages of u16 length then bytes, each named
// by its offset within the message area).

func opsSize(n int) int     { return align(n*pluginrpc.OpRecordSize, 8) }
func recordsSize(n int) int { return n * RecordSize }
func msgAreaSize(n int) int { return min(2048+64*n, 256<<10) }

// AreaSize is the size of the batch area of n ops.
func AreaSize(n int) int { return opsSize(n) + recordsSize(n) + msgAreaSize(n) }

// Sub is a submission queue entry.
type Sub struct {
	Op   uint32 // OpBatch or OpCancel
	NOps uint32
	ID   uint64 // the host's batch id, never 0
	Peer uint64
	// Area is the batch area's offset within the arena.
	Area uint64
	// Timeout is how long the batch may run (ns); 0 = no limit.
	Timeout int64
}

// Comp is a completion queue entry.
type Comp struct {
	ID    uint64
	NRec  uint32 // failed-op records in the batch area
	Flags uint32
	// BatchKinds and BatchMsg describe a batch-level error (with
	// FlagBatchError).
	BatchKinds uint32
	BatchMsg   uint32
	// Posted is when the plugin published the completion (Unix ns): the
	// host learns from it how long to spin. Only a hint.
	Posted int64
}

// PutSub encodes e into b (SubSize bytes).
func PutSub(b []byte, e Sub) {
	_ = b[SubSize-1]
	binary.LittleEndian.PutUint32(b[0:], e.Op)
	binary.LittleEndian.PutUint32(b[4:], e.NOps)
	binary.LittleEndian.PutUint64(b[8:], e.ID)
	binary.LittleEndian.PutUint64(b[16:], e.Peer)
	binary.LittleEndian.PutUint64(b[24:], e.Area)
	binary.LittleEndian.PutUint64(b[32:], uint64(e.Timeout))
	clear(b[40:SubSize])
}

// GetSub decodes an SQ entry.
func GetSub(b []byte) Sub {
	_ = b[SubSize-1]
	return Sub{
		Op: binary.LittleEndian.Uint32(b[0:]), NOps: binary.LittleEndian.Uint32(b[4:]),
		ID: binary.LittleEndian.Uint64(b[8:]), Peer: binary.LittleEndian.Uint64(b[16:]),
		Area: binary.LittleEndian.Uint64(b[24:]), Timeout: int64(binary.LittleEndian.Uint64(b[32:])),
	}
}

// PutComp encodes e into b (CompSize bytes).
func PutComp(b []byte, e Comp) {
	_ = b[CompSize-1]
	binary.LittleEndian.PutUint64(b[0:], e.ID)
	binary.LittleEndian.PutUint32(b[8:], e.NRec)
	binary.LittleEndian.PutUint32(b[12:], e.Flags)
	binary.LittleEndian.PutUint32(b[16:], e.BatchKinds)
	binary.LittleEndian.PutUint32(b[20:], e.BatchMsg)
	binary.LittleEndian.PutUint64(b[24:], uint64(e.Posted))
}

// GetComp decodes a CQ entry.
func GetComp(b []byte) Comp {
	_ = b[CompSize-1]
	return Comp{
		ID: binary.LittleEndian.Uint64(b[0:]), NRec: binary.LittleEndian.Uint32(b[8:]),
		Flags: binary.LittleEndian.Uint32(b[12:]), BatchKinds: binary.LittleEndian.Uint32(b[16:]), BatchMsg: binary.LittleEndian.Uint32(b[20:]),
		Posted: int64(binary.LittleEndian.Uint64(b[24:])),
	}
}

// CheckSub validates a submission read from the SQ against the layout:
// a known kind, a non-zero id, and a batch area inside the arena. It is
// what the plugin side runs before touching the area.
func (l Layout) CheckSub(e Sub) error {
	switch e.Op {
	case OpCancel:
		if e.ID == 0 {
			return fmt.Errorf("ring: cancellation of batch 0: %w", errdefs.ErrProtocol)
		}
		return nil
	case OpBatch:
	default:
		return fmt.Errorf("ring: submission of unknown kind %d: %w", e.Op, errdefs.ErrProtocol)
	}
	if e.ID == 0 {
		return fmt.Errorf("ring: batch id 0: %w", errdefs.ErrProtocol)
	}
	if e.NOps == 0 || int(e.NOps) > pluginrpc.MaxOps {
		return fmt.Errorf("ring: batch %d of %d ops: %w", e.ID, e.NOps, errdefs.ErrProtocol)
	}
	size := uint64(AreaSize(int(e.NOps)))
	if e.Area%8 != 0 || e.Area > uint64(l.ArenaSize()) || size > uint64(l.ArenaSize())-e.Area {
		return fmt.Errorf("ring: batch %d: area [%d, +%d) is not inside the %d-byte arena: %w", e.ID, e.Area, size, l.ArenaSize(), errdefs.ErrProtocol)
	}
	return nil
}

// Area is a batch's area of the arena: n ops, room for n records, a
// message area. Its methods bounds-check what they are given; a zero Area
// is empty.
type Area struct {
	ops, recs, msgs []byte
	n               int
}

// AreaAt returns the area of n ops at offset off of arena, or an error if
// it does not fit.
func AreaAt(arena []byte, off uint64, n int) (Area, error) {
	if n <= 0 || n > pluginrpc.MaxOps {
		return Area{}, fmt.Errorf("ring: area of %d ops: %w", n, errdefs.ErrProtocol)
	}
	size := uint64(AreaSize(n))
	if off > uint64(len(arena)) || size > uint64(len(arena))-off {
		return Area{}, fmt.Errorf("ring: area [%d, +%d) outside the %d-byte arena: %w", off, size, len(arena), errdefs.ErrProtocol)
	}
	b := arena[off : off+size : off+size]
	o, r := opsSize(n), recordsSize(n)
	return Area{ops: b[:n*pluginrpc.OpRecordSize], recs: b[o : o+r], msgs: b[o+r:], n: n}, nil
}

// Len is the number of ops the area holds.
func (a Area) Len() int { return a.n }

// PutOp writes op i.
func (a Area) PutOp(i int, op pluginrpc.Op) {
	var r [pluginrpc.OpRecordSize]byte
	pluginrpc.AppendOp(r[:0], op)
	copy(a.ops[i*pluginrpc.OpRecordSize:], r[:])
}

// Op reads op i (0 <= i < Len).
func (a Area) Op(i int) pluginrpc.Op { return pluginrpc.DecodeOp(a.ops, i) }

// Record is one failed op: its index, the sentinels of its error as a
// kinds mask, and its message (a message-area offset, or NoMsg).
type Record struct {
	Index uint32
	Kinds uint32
	Msg   uint32
}

// PutRecord writes record j (0 <= j < Len).
func (a Area) PutRecord(j int, r Record) {
	b := a.recs[j*RecordSize : j*RecordSize+RecordSize]
	binary.LittleEndian.PutUint32(b[0:], r.Index)
	binary.LittleEndian.PutUint32(b[4:], r.Kinds)
	binary.LittleEndian.PutUint32(b[8:], r.Msg)
}

// record reads record j (0 <= j < Len).
func (a Area) record(j int) Record {
	b := a.recs[j*RecordSize : j*RecordSize+RecordSize]
	return Record{Index: binary.LittleEndian.Uint32(b[0:]), Kinds: binary.LittleEndian.Uint32(b[4:]), Msg: binary.LittleEndian.Uint32(b[8:])}
}

// Messages writes messages into an area's message area, each distinct
// message once, as long as room lasts. It is not safe for concurrent
// use.
type Messages struct {
	area []byte
	used int
	seen map[string]uint32
}

// Messages returns the writer of a's message area.
func (a Area) Messages() *Messages { return &Messages{area: a.msgs} }

// Add stores msg (truncated to MaxMessage bytes) and returns its
// reference, or NoMsg when the area is full.
func (m *Messages) Add(msg string) uint32 {
	if len(msg) > MaxMessage {
		msg = msg[:MaxMessage]
	}
	if ref, ok := m.seen[msg]; ok {
		return ref
	}
	if m.used+2+len(msg) > len(m.area) {
		return NoMsg
	}
	ref := uint32(m.used)
	binary.LittleEndian.PutUint16(m.area[m.used:], uint16(len(msg)))
	copy(m.area[m.used+2:], msg)
	m.used += 2 + len(msg)
	if m.seen == nil {
		m.seen = map[string]uint32{}
	}
	m.seen[msg] = ref
	return ref
}

// message reads the message at ref.
func (a Area) message(ref uint32) (string, error) {
	if ref == NoMsg {
		return "", nil
	}
	if uint64(ref)+2 > uint64(len(a.msgs)) {
		return "", fmt.Errorf("ring: message at %d outside the %d-byte message area: %w", ref, len(a.msgs), errdefs.ErrProtocol)
	}
	n := int(binary.LittleEndian.Uint16(a.msgs[ref:]))
	if n > MaxMessage || int(ref)+2+n > len(a.msgs) {
		return "", fmt.Errorf("ring: message of %d bytes at %d outside the %d-byte message area: %w", n, ref, len(a.msgs), errdefs.ErrProtocol)
	}
	return string(a.msgs[int(ref)+2 : int(ref)+2+n]), nil
}
