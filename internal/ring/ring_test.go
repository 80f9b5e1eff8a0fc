package ring

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/kvconnect/kvconnect/errdefs"
	"github.com/kvconnect/kvconnect/internal/pluginrpc"
)

func TestLayoutValidate(t *testing.T) {
	good := DefaultLayout()
	for _, tc := range []struct {
		name string
		mod  func(*Layout)
		ok   bool
	}{
		{"default", func(*Layout) {}, true},
		{"SQ not a power of two", func(l *Layout) { l.SQEntries = 3000 }, false},
		{"SQ zero", func(l *Layout) { l.SQEntries = 0 }, false},
		{"CQ more than half the SQ", func(l *Layout) { l.CQEntries = l.SQEntries }, false},
		{"CQ not a power of two", func(l *Layout) { l.CQEntries = 100 }, false},
		{"slot too small", func(l *Layout) { l.SlotSize = 512 }, false},
		{"slot not a multiple of 64", func(l *Layout) { l.SlotSize = 4100 }, false},
		{"no arena", func(l *Layout) { l.ArenaSlots = 0 }, false},
		{"arena too large", func(l *Layout) { l.ArenaSlots, l.SlotSize = 1<<16, 1<<20 }, false},
		{"small", func(l *Layout) { *l = Layout{SQEntries: 8, CQEntries: 4, SlotSize: 1024, ArenaSlots: 8} }, true},
	} {
		l := good
		tc.mod(&l)
		if err := l.Validate(); (err == nil) != tc.ok {
			t.Errorf("%s: Validate = %v", tc.name, err)
		} else if err != nil && !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%s: %v is not ErrInvalidArgument", tc.name, err)
		}
	}
	if good.MaxOps() != pluginrpc.MaxOps {
		t.Errorf("the default layout holds batches of %d ops, want %d", good.MaxOps(), pluginrpc.MaxOps)
	}
	small := Layout{SQEntries: 8, CQEntries: 4, SlotSize: 1024, ArenaSlots: 8}
	if n := small.MaxOps(); n <= 0 || AreaSize(n) > small.ArenaSize() {
		t.Errorf("MaxOps of a small arena: %d (area %d of %d)", n, AreaSize(n), small.ArenaSize())
	}
}

func TestEntriesRoundTrip(t *testing.T) {
	s := Sub{Op: OpBatch, NOps: 7, ID: 1<<63 + 5, Peer: 42, Area: 4096 * 3, Timeout: int64(time.Second)}
	b := make([]byte, SubSize)
	for i := range b {
		b[i] = 0xff // PutSub clears the reserved bytes
	}
	PutSub(b, s)
	if got := GetSub(b); got != s || b[SubSize-1] != 0 {
		t.Fatalf("Sub round trip: %+v", got)
	}
	c := Comp{ID: 9, NRec: 3, Flags: FlagBatchError, BatchKinds: 0x81, BatchMsg: 12, Posted: time.Now().UnixNano()}
	cb := make([]byte, CompSize)
	PutComp(cb, c)
	if got := GetComp(cb); got != c {
		t.Fatalf("Comp round trip: %+v", got)
	}
}

func TestCheckSub(t *testing.T) {
	l := Layout{SQEntries: 8, CQEntries: 4, SlotSize: 1024, ArenaSlots: 64}
	fits := uint64(l.ArenaSize() - AreaSize(10))
	for _, tc := range []struct {
		name string
		s    Sub
		ok   bool
	}{
		{"batch", Sub{Op: OpBatch, NOps: 10, ID: 1}, true},
		{"batch at the end", Sub{Op: OpBatch, NOps: 10, ID: 1, Area: fits &^ 7}, true},
		{"cancel", Sub{Op: OpCancel, ID: 3}, true},
		{"unknown kind", Sub{Op: 9, NOps: 1, ID: 1}, false},
		{"id 0", Sub{Op: OpBatch, NOps: 1}, false},
		{"cancel of 0", Sub{Op: OpCancel}, false},
		{"no ops", Sub{Op: OpBatch, ID: 1}, false},
		{"too many ops", Sub{Op: OpBatch, NOps: pluginrpc.MaxOps + 1, ID: 1}, false},
		{"more ops than the arena holds", Sub{Op: OpBatch, NOps: pluginrpc.MaxOps, ID: 1}, false},
		{"area past the end", Sub{Op: OpBatch, NOps: 10, ID: 1, Area: fits + 8}, false},
		{"area far past the end", Sub{Op: OpBatch, NOps: 10, ID: 1, Area: ^uint64(0) &^ 7}, false},
		{"unaligned area", Sub{Op: OpBatch, NOps: 10, ID: 1, Area: 3}, false},
	} {
		err := l.CheckSub(tc.s)
		if (err == nil) != tc.ok {
			t.Errorf("%s: CheckSub = %v", tc.name, err)
		}
		if err != nil && !errors.Is(err, errdefs.ErrProtocol) {
			t.Errorf("%s: %v is not ErrProtocol", tc.name, err)
		}
		if err == nil && tc.s.Op == OpBatch {
			arena := make([]byte, l.ArenaSize())
			if _, err := AreaAt(arena, tc.s.Area, int(tc.s.NOps)); err != nil {
				t.Errorf("%s: accepted, but AreaAt refuses it: %v", tc.name, err)
			}
		}
	}
}

// kinds is the host's table, as the setup RPC carries it.
var kinds = NewKinds(errdefs.KindNames())

func newArea(t testing.TB, n int) Area {
	t.Helper()
	a, err := AreaAt(make([]byte, AreaSize(n)), 0, n)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestResultsRoundTrip: failed ops come back with their sentinels and
// messages, distinct messages stored once, long ones truncated; a batch
// error too; ops are packed as pluginrpc packs them.
func TestResultsRoundTrip(t *testing.T) {
	const n = 200
	a := newArea(t, n)
	for i := 0; i < n; i++ {
		a.PutOp(i, pluginrpc.Op{Kind: 1, LocalRegion: uint64(i), Length: uint64(i) * 3})
	}
	for i := 0; i < n; i++ {
		if got := a.Op(i); got.LocalRegion != uint64(i) || got.Length != uint64(i)*3 || got.Kind != 1 {
			t.Fatalf("op %d: %+v", i, got)
		}
	}
	long := strings.Repeat("x", 5000)
	errs := map[int]error{
		3:   fmt.Errorf("tcp: op 3: %w", errdefs.ErrOutOfBounds),
		4:   fmt.Errorf("tcp: op 3: %w", errdefs.ErrOutOfBounds), // same message: stored once
		10:  fmt.Errorf("tcp: lost: %w: %w", errdefs.ErrPeerUnreachable, errdefs.ErrTimeout),
		199: errors.New(long),
	}
	batch := fmt.Errorf("tcp: closed: %w", errdefs.ErrClosed)
	c := EncodeResults(a, 77, kinds, n, func(i int) error { return errs[i] }, batch)
	if c.ID != 77 || c.NRec != 4 || c.Flags&FlagBatchError == 0 {
		t.Fatalf("completion %+v", c)
	}
	if r3, r4 := a.record(0), a.record(1); r3.Msg != r4.Msg {
		t.Error("a repeated message was stored twice")
	}
	got := map[int]error{}
	berr, perr := DecodeResults(a, c, kinds, "plugin x", func(i int, err error) { got[i] = err })
	if perr != nil {
		t.Fatal(perr)
	}
	if len(got) != len(errs) {
		t.Fatalf("%d failures came back, want %d", len(got), len(errs))
	}
	for i, want := range errs {
		g := got[i]
		for _, k := range errdefs.Kinds(want) {
			if !errors.Is(g, errdefs.FromKind(k)) {
				t.Errorf("op %d: %v lost sentinel %s", i, g, k)
			}
		}
		if i != 199 && g.Error() != want.Error() {
			t.Errorf("op %d: message %q, want %q", i, g, want)
		}
	}
	if len(got[199].Error()) != MaxMessage {
		t.Errorf("a long message came back with %d bytes, want %d", len(got[199].Error()), MaxMessage)
	}
	if !errors.Is(berr, errdefs.ErrClosed) || berr.Error() != batch.Error() {
		t.Errorf("batch error %v", berr)
	}
}

// TestMessagesRunOut: when the message area is full, failures keep their
// sentinels and get a message saying none was recorded.
func TestMessagesRunOut(t *testing.T) {
	const n = 4
	a := newArea(t, n)
	c := EncodeResults(a, 1, kinds, n, func(i int) error {
		return fmt.Errorf("%s: %w", strings.Repeat(string(rune('a'+i)), MaxMessage), errdefs.ErrOutOfBounds)
	}, nil)
	got := map[int]error{}
	if _, perr := DecodeResults(a, c, kinds, "plugin x", func(i int, err error) { got[i] = err }); perr != nil {
		t.Fatal(perr)
	}
	lost := 0
	for i := 0; i < n; i++ {
		if !errors.Is(got[i], errdefs.ErrOutOfBounds) {
			t.Errorf("op %d lost its sentinel: %v", i, got[i])
		}
		if strings.Contains(got[i].Error(), "recorded no message") {
			lost++
		}
	}
	if lost == 0 || lost == n {
		t.Errorf("%d of %d messages lost; want the area to hold some", lost, n)
	}
}

// TestDecodeRefusesNonsense: whatever a plugin writes, decoding ends in
// a protocol error, never a panic or an op out of range.
func TestDecodeRefusesNonsense(t *testing.T) {
	const n = 8
	for _, tc := range []struct {
		name string
		c    Comp
		recs []Record
		msgs func(m []byte)
	}{
		{"more records than ops", Comp{NRec: n + 1}, nil, nil},
		{"huge count", Comp{NRec: ^uint32(0)}, nil, nil},
		{"index out of range", Comp{NRec: 1}, []Record{{Index: n, Msg: NoMsg}}, nil},
		{"huge index", Comp{NRec: 1}, []Record{{Index: ^uint32(0), Msg: NoMsg}}, nil},
		{"index twice", Comp{NRec: 2}, []Record{{Index: 1, Msg: NoMsg}, {Index: 1, Msg: NoMsg}}, nil},
		{"message outside the area", Comp{NRec: 1}, []Record{{Index: 0, Msg: 1 << 30}}, nil},
		{"message running past the area", Comp{NRec: 1}, []Record{{Index: 0, Msg: 0}}, func(m []byte) { binary.LittleEndian.PutUint16(m, uint16(len(m))) }},
		{"message too long", Comp{NRec: 1}, []Record{{Index: 0, Msg: 0}}, func(m []byte) { binary.LittleEndian.PutUint16(m, MaxMessage+1) }},
		{"batch message outside", Comp{Flags: FlagBatchError, BatchMsg: ^uint32(0) - 1}, nil, nil},
	} {
		a := newArea(t, n)
		for j, r := range tc.recs {
			a.PutRecord(j, r)
		}
		if tc.msgs != nil {
			tc.msgs(a.msgs)
		}
		_, perr := DecodeResults(a, tc.c, kinds, "plugin x", func(i int, err error) {
			if i < 0 || i >= n {
				t.Errorf("%s: op %d reported", tc.name, i)
			}
		})
		if !errors.Is(perr, errdefs.ErrProtocol) {
			t.Errorf("%s: %v, want ErrProtocol", tc.name, perr)
		}
	}
}

func TestKinds(t *testing.T) {
	k := NewKinds([]string{"timeout", "", "timeout", "closed", "not_a_kind"})
	err := fmt.Errorf("x: %w: %w", errdefs.ErrTimeout, errdefs.ErrClosed)
	if m := k.Mask(err); m != 1|1<<3 {
		t.Fatalf("mask %b", m)
	}
	if got := k.Names(^uint32(0)); strings.Join(got, ",") != "timeout,closed,not_a_kind" {
		t.Fatalf("names %v", got)
	}
	if back := k.errorOf(1<<3, "", "op 2"); !errors.Is(back, errdefs.ErrClosed) || !strings.Contains(back.Error(), "op 2") {
		t.Fatalf("made-up error %v", back)
	}
	many := make([]string, 40)
	for i := range many {
		many[i] = fmt.Sprint(i)
	}
	if got := len(NewKinds(many).names); got != MaxKinds {
		t.Fatalf("%d kinds kept, want %d", got, MaxKinds)
	}
}

func alignedMem(size int) []byte {
	b := make([]byte, size+64)
	off := (64 - int(uintptr(unsafe.Pointer(&b[0]))%64)) % 64
	return b[off : off+size]
}

func TestSharedHeaderAndQueues(t *testing.T) {
	l := Layout{SQEntries: 8, CQEntries: 4, SlotSize: 1024, ArenaSlots: 8}
	mem := alignedMem(l.Size())
	s, err := Attach(mem, l)
	if err != nil {
		t.Fatal(err)
	}
	s.WriteHeader()
	if err := s.CheckHeader(); err != nil {
		t.Fatal(err)
	}
	other, _ := Attach(mem, Layout{SQEntries: 16, CQEntries: 4, SlotSize: 1024, ArenaSlots: 8})
	if err := other.CheckHeader(); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("a header of another layout: %v", err)
	}
	if _, err := Attach(mem[:l.Size()-1], l); err == nil {
		t.Fatal("Attach accepted a short mapping")
	}
	PutSub(s.Sub(9), Sub{Op: OpBatch, ID: 5}) // wraps to entry 1
	if GetSub(s.Sub(1)).ID != 5 {
		t.Fatal("SQ index does not wrap")
	}
	binary.LittleEndian.PutUint64(mem, 0)
	if err := s.CheckHeader(); err == nil {
		t.Fatal("a header without the magic passed")
	}
	if len(s.Arena()) != l.ArenaSize() {
		t.Fatal("arena size")
	}
}

// TestSleepWakes: a sleeper wakes when the word moves (with the
// producer's notify) and when someone wakes it, never missing a change
// that came before it slept, whether it keeps its processor or hands it
// off, and with one processor in all (where a sleeper that held it would
// leave the producer waiting for the runtime to take it back).
func TestSleepWakes(t *testing.T) {
	if !Supported {
		t.Skip("no futex here")
	}
	for _, how := range []Wait{Brief, Handoff} {
		for _, procs := range []int{0, 1} {
			t.Run(fmt.Sprintf("%s/GOMAXPROCS=%d", how, procs), func(t *testing.T) {
				if procs > 0 {
					defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
				}
				sleepWakes(t, how)
			})
		}
	}
}

func sleepWakes(t *testing.T, how Wait) {
	l := Layout{SQEntries: 8, CQEntries: 4, SlotSize: 1024, ArenaSlots: 8}
	s, _ := Attach(alignedMem(l.Size()), l)
	woke := make(chan uint32)
	var stop sync.WaitGroup
	stop.Add(1)
	go func() {
		defer stop.Done()
		seen := uint32(0)
		for seen < 100 {
			if v := s.Load(CQTail); v != seen {
				seen = v
				woke <- v
				continue
			}
			s.Sleep(CQTail, seen, CQIdle, func() bool { return false }, 0, how)
		}
	}()
	for i := uint32(1); i <= 100; i++ {
		s.Store(CQTail, i)
		s.NotifyCQ()
		select {
		case v := <-woke:
			if v != i {
				t.Fatalf("woke with %d, want %d", v, i)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("the sleeper missed publication %d", i)
		}
	}
	stop.Wait()
}

// TestAwaitHandoffThroughGC: goroutines asleep with their processor
// handed off (outside the runtime's usual system-call path) are left
// alone by collections and stack growth elsewhere, wake on their word,
// and their timeouts end their sleep.
func TestAwaitHandoffThroughGC(t *testing.T) {
	if !Supported {
		t.Skip("no futex here")
	}
	l := Layout{SQEntries: 8, CQEntries: 4, SlotSize: 1024, ArenaSlots: 8}
	s, _ := Attach(alignedMem(l.Size()), l)
	const sleepers = 8
	var left sync.WaitGroup
	var woken atomic.Int32
	for range sleepers {
		left.Add(1)
		go func() {
			defer left.Done()
			for s.Load(SQKick) == 0 {
				s.Await(SQKick, 0, 0, Handoff)
			}
			woken.Add(1)
		}()
	}
	// A sleeper with a timeout returns with the word unchanged.
	timedOut := make(chan struct{})
	go func() {
		s.Await(CQHead, 0, time.Millisecond, Handoff)
		close(timedOut)
	}()
	var deep func(n int) int
	deep = func(n int) int {
		var pad [512]byte
		if n == 0 {
			return int(pad[0])
		}
		return deep(n-1) + int(pad[n%len(pad)])
	}
	for range 20 {
		runtime.GC()
		deep(200) // grows this goroutine's stack
	}
	select {
	case <-timedOut:
	case <-time.After(10 * time.Second):
		t.Fatal("a sleep with a 1ms timeout did not end")
	}
	s.Add(SQKick, 1)
	done := make(chan struct{})
	go func() { left.Wait(); close(done) }()
	for {
		s.Wake(SQKick)
		select {
		case <-done:
			if n := woken.Load(); n != sleepers {
				t.Fatalf("%d of %d sleepers woke", n, sleepers)
			}
			return
		case <-time.After(time.Millisecond):
			// a Wake before a sleeper's futex is lost: repeat it
		}
	}
}

// FuzzDecodeResults: a plugin can write anything into a batch's area and
// its completion: decoding never panics, and whatever it accepts names
// each op at most once and only ops of the batch.
func FuzzDecodeResults(f *testing.F) {
	a := newArea(f, 3)
	c := EncodeResults(a, 1, kinds, 3, func(i int) error {
		if i == 1 {
			return fmt.Errorf("x: %w", errdefs.ErrOutOfBounds)
		}
		return nil
	}, errdefs.ErrClosed)
	seed := append([]byte(nil), a.recs...)
	seed = append(seed, a.msgs[:64]...)
	f.Add(seed, uint8(3), c.NRec, c.Flags, c.BatchKinds, c.BatchMsg)
	f.Add([]byte{0xff, 0xff, 0xff, 0xff}, uint8(1), uint32(1), uint32(1), ^uint32(0), uint32(0))
	f.Fuzz(func(t *testing.T, data []byte, n uint8, nrec, flags, bkinds, bmsg uint32) {
		ops := int(n%64) + 1
		a := newArea(t, ops)
		copy(a.recs, data)
		if len(data) > len(a.recs) {
			copy(a.msgs, data[len(a.recs):])
		}
		seen := map[int]bool{}
		_, perr := DecodeResults(a, Comp{ID: 1, NRec: nrec, Flags: flags, BatchKinds: bkinds, BatchMsg: bmsg}, kinds, "plugin f", func(i int, err error) {
			if i < 0 || i >= ops || seen[i] {
				t.Fatalf("op %d reported (of %d; seen %v)", i, ops, seen[i])
			}
			if err == nil {
				t.Fatal("a failure without an error")
			}
			seen[i] = true
		})
		if perr == nil && uint32(len(seen)) != nrec {
			t.Fatalf("accepted %d records, reported %d", nrec, len(seen))
		}
	})
}

// FuzzCheckSub: any 64 bytes in an SQ entry either fail CheckSub or name
// an area that fits the arena.
func FuzzCheckSub(f *testing.F) {
	b := make([]byte, SubSize)
	PutSub(b, Sub{Op: OpBatch, NOps: 3, ID: 1, Area: 4096})
	f.Add(b)
	f.Add(make([]byte, SubSize))
	l := Layout{SQEntries: 8, CQEntries: 4, SlotSize: 1024, ArenaSlots: 64}
	arena := make([]byte, l.ArenaSize())
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < SubSize {
			data = append(data, make([]byte, SubSize-len(data))...)
		}
		e := GetSub(data)
		if l.CheckSub(e) != nil || e.Op != OpBatch {
			return
		}
		a, err := AreaAt(arena, e.Area, int(e.NOps))
		if err != nil {
			t.Fatalf("CheckSub accepted %+v; AreaAt: %v", e, err)
		}
		_ = a.Op(a.Len() - 1)
	})
}
