package ring

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/kvconnect/kvconnect/errdefs"
)

// Word names a control word of the header.
type Word int

// The control words. Tails, heads and states are counters or flags one
// side writes and the other reads, all with sequentially consistent
// atomics (sync/atomic), so a store of a tail publishes the entries
// written before it.
const (
	SQTail      Word = offSQTail // host: submissions published
	SQHead      Word = offSQHead // plugin: submissions consumed
	SQIdle      Word = offSQIdle // plugin: its SQ sleeper sleeps
	SQSpin      Word = offSQSpin // plugin: goroutines spinning on the SQ
	SQBusy      Word = offSQBusy // plugin: its SQ sleeper runs a batch itself
	SQBell      Word = offSQBell // plugin: its SQ sleeper waits on the doorbell
	SQKick      Word = offSQKick // host: bumped to wake the plugin's standby
	CQTail      Word = offCQTail // plugin: completions published
	CQHead      Word = offCQHead // host: completions consumed
	CQIdle      Word = offCQIdle // host: its CQ poller sleeps
	HostState   Word = offHost
	PluginState Word = offPlugin
)

// Shared is a ring file as one process maps it. Its methods only compute
// addresses and move words and entries: which side may write what, and
// in which order, is the protocol of docs/DATAPATH.md, kept by the host
// and plugin sides. It is safe for concurrent use as far as the memory
// is (entries are plain memory; words are atomic).
type Shared struct {
	mem   []byte
	l     Layout
	sq    []byte
	cq    []byte
	arena []byte
	bell  *Doorbell // the host's end, when the ring has one
}

// Attach wraps a mapping of a ring file of layout l. mem must be 8-byte
// aligned (a mapping is page aligned) and at least l.Size() bytes.
func Attach(mem []byte, l Layout) (*Shared, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	if len(mem) < l.Size() {
		return nil, fmt.Errorf("ring: a mapping of %d bytes is too small for the layout's %d: %w", len(mem), l.Size(), errdefs.ErrInvalidArgument)
	}
	if uintptr(unsafe.Pointer(unsafe.SliceData(mem)))%64 != 0 {
		return nil, fmt.Errorf("ring: the mapping is not 64-byte aligned: %w", errdefs.ErrInvalidArgument)
	}
	return &Shared{
		mem: mem, l: l,
		sq:    mem[l.SQOffset():l.CQOffset():l.CQOffset()],
		cq:    mem[l.CQOffset() : l.CQOffset()+int(l.CQEntries)*CompSize : l.CQOffset()+int(l.CQEntries)*CompSize],
		arena: mem[l.ArenaOffset():l.Size():l.Size()],
	}, nil
}

// WriteHeader writes the header of a new ring (the host, before it hands
// the file to the plugin).
func (s *Shared) WriteHeader() {
	h := s.mem[:HeaderSize]
	clear(h)
	binary.LittleEndian.PutUint64(h[offMagic:], Magic)
	binary.LittleEndian.PutUint32(h[offVersion:], Version)
	binary.LittleEndian.PutUint32(h[offHeaderSize:], HeaderSize)
	binary.LittleEndian.PutUint32(h[offSQEntries:], s.l.SQEntries)
	binary.LittleEndian.PutUint32(h[offCQEntries:], s.l.CQEntries)
	binary.LittleEndian.PutUint32(h[offSlotSize:], s.l.SlotSize)
	binary.LittleEndian.PutUint32(h[offArenaSlots:], s.l.ArenaSlots)
}

// CheckHeader checks that the header describes the layout the ring was
// attached with (the plugin, before it serves the ring).
func (s *Shared) CheckHeader() error {
	h := s.mem[:HeaderSize]
	got := Layout{
		SQEntries: binary.LittleEndian.Uint32(h[offSQEntries:]), CQEntries: binary.LittleEndian.Uint32(h[offCQEntries:]),
		SlotSize: binary.LittleEndian.Uint32(h[offSlotSize:]), ArenaSlots: binary.LittleEndian.Uint32(h[offArenaSlots:]),
	}
	switch {
	case binary.LittleEndian.Uint64(h[offMagic:]) != Magic:
		return fmt.Errorf("ring: the file is not a ring (magic 0x%x): %w", binary.LittleEndian.Uint64(h[offMagic:]), errdefs.ErrInvalidArgument)
	case binary.LittleEndian.Uint32(h[offVersion:]) != Version:
		return fmt.Errorf("ring: version %d, this side speaks %d: %w", binary.LittleEndian.Uint32(h[offVersion:]), Version, errdefs.ErrNotSupported)
	case binary.LittleEndian.Uint32(h[offHeaderSize:]) != HeaderSize || got != s.l:
		return fmt.Errorf("ring: the header describes %+v, the setup request %+v: %w", got, s.l, errdefs.ErrInvalidArgument)
	}
	return nil
}

// Layout is the ring's geometry.
func (s *Shared) Layout() Layout { return s.l }

// Arena is the arena.
func (s *Shared) Arena() []byte { return s.arena }

func (s *Shared) word(w Word) *uint32 { return (*uint32)(unsafe.Pointer(&s.mem[w])) }

// Load, Store and Add access control word w atomically.
func (s *Shared) Load(w Word) uint32      { return atomic.LoadUint32(s.word(w)) }
func (s *Shared) Store(w Word, v uint32)  { atomic.StoreUint32(s.word(w), v) }
func (s *Shared) Add(w Word, d int32) int { return int(int32(atomic.AddUint32(s.word(w), uint32(d)))) }

// Sub and Comp are the bytes of SQ entry i and CQ entry i (modulo the
// queue's size).
func (s *Shared) Sub(i uint32) []byte {
	o := int(i&(s.l.SQEntries-1)) * SubSize
	return s.sq[o : o+SubSize : o+SubSize]
}
func (s *Shared) Comp(i uint32) []byte {
	o := int(i&(s.l.CQEntries-1)) * CompSize
	return s.cq[o : o+CompSize : o+CompSize]
}

// Wake wakes the processes sleeping on w.
func (s *Shared) Wake(w Word) { futexWake(s.word(w), 1<<30) }

// NotifySQ is what the host does after publishing submissions: unless a
// plugin goroutine is spinning on the SQ (that one will see them), ring
// the doorbell if the plugin's SQ sleeper waits on it, else wake the
// sleeper if it sleeps on the futex, or, if it is busy running a
// batch itself, bump SQKick and wake the plugin's standby, which sleeps
// on it. The host's store of SQTail comes before these loads, and a
// plugin goroutine announces sleeping, spinning or being busy before it
// stops looking at SQTail, and stops doing so only after (each of
// SQIdle, SQBell, SQSpin and SQBusy drops only once another is raised or SQTail
// is looked at again), so one of the two sees the other: no submission
// waits for a wake-up that never comes.
func (s *Shared) NotifySQ() {
	if s.Load(SQSpin) != 0 {
		return
	}
	if s.bell != nil && s.Load(SQBell) != 0 {
		s.bell.Ring()
		return
	}
	if s.Load(SQIdle) != 0 {
		s.Wake(SQTail)
		return
	}
	if s.Load(SQBusy) != 0 {
		s.Add(SQKick, 1)
		s.Wake(SQKick)
	}
}

// SetDoorbell gives the host's side the ring's doorbell: NotifySQ rings
// it while the plugin's sleeper waits on it (SQBell). Call it before the
// ring carries batches.
func (s *Shared) SetDoorbell(d *Doorbell) { s.bell = d }

// SleepOnBell is Sleep on the plugin's doorbell: it raises SQBell, looks
// at the SQ tail and done once more, then waits until the host rings
// (NotifySQ) or d is interrupted. Spurious returns happen; the caller
// rechecks.
func (s *Shared) SleepOnBell(d *Doorbell, seen uint32, done func() bool) {
	s.Store(SQBell, 1)
	if s.Load(SQTail) == seen && !done() {
		d.Wait()
	}
	s.Store(SQBell, 0)
}

// NotifyCQ is what the plugin does after publishing completions: wake the
// host's poller if it sleeps.
func (s *Shared) NotifyCQ() {
	if s.Load(CQIdle) != 0 {
		s.Wake(CQTail)
	}
}

// Sleep waits, without spinning, until w differs from seen, someone calls
// Wake(w), timeout passes (when > 0), or done reports true: it raises
// idle, looks at w and done once more, then sleeps on the futex.
// Spurious returns happen; the caller rechecks. A Wake that comes
// between the last look at done and the futex is lost: whoever makes
// done true and wakes the sleeper must repeat the wake until the sleeper
// has left, or the sleeper must sleep with a timeout. how says what the
// thread does with its processor meanwhile.
func (s *Shared) Sleep(w Word, seen uint32, idle Word, done func() bool, timeout time.Duration, how Wait) {
	s.Store(idle, 1)
	if s.Load(w) == seen && !done() {
		futexWait(s.word(w), seen, timeout, how)
	}
	s.Store(idle, 0)
}

// Await sleeps on w's futex while w holds seen, until a Wake(w) or
// timeout (when > 0). Spurious returns happen, and a Wake before the
// sleep is lost: the caller rechecks, and whoever must end the wait
// repeats its wake until the waiter has left. how says what the thread
// does with its processor meanwhile.
func (s *Shared) Await(w Word, seen uint32, timeout time.Duration, how Wait) {
	futexWait(s.word(w), seen, timeout, how)
}

// Tuning knobs (environment variables) fixing the spin budgets
// (spin.NewAdapt): a Go duration, or 0 for no spinning.
const (
	EnvHostSpin   = "KVCONNECT_RING_HOST_SPIN"
	EnvPluginSpin = "KVCONNECT_RING_PLUGIN_SPIN"
)
