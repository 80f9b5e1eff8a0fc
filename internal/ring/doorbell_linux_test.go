//go:build linux

package ring

import (
	"errors"
	"os"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/kvconnect/kvconnect/errdefs"
	"github.com/kvconnect/kvconnect/internal/testbin"
)

// doorbellPair makes the host's end and, from a duplicate of its
// descriptor (what the fd channel delivers), the plugin's.
func doorbellPair(t *testing.T) (host, plugin *Doorbell) {
	t.Helper()
	host, err := NewDoorbell()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(host.Close)
	dup, err := unix.FcntlInt(host.File().Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	plugin, err = OpenDoorbell(os.NewFile(uintptr(dup), "sent"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(plugin.Close)
	return host, plugin
}

// pending reads the eventfd's count without waiting: 0 when nothing
// rang it since the last read.
func pending(t *testing.T, d *Doorbell) uint64 {
	t.Helper()
	var n uint64
	_, _, e := unix.RawSyscall(unix.SYS_READ, uintptr(d.fd), uintptr(unsafe.Pointer(&n)), 8)
	if e == unix.EAGAIN {
		return 0
	}
	if e != 0 {
		t.Fatalf("reading the doorbell: %v", e)
	}
	return n
}

// waitReturns runs f and fails the test unless it returns within
// testbin.WaitLimit.
func waitReturns(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { f(); close(done) }()
	select {
	case <-done:
	case <-time.After(testbin.WaitLimit):
		t.Fatalf("%s never returned", what)
	}
}

// TestDoorbellRings: the host's ring reaches the plugin's end (another
// descriptor of the same eventfd); a Wait consumes it, and Interrupt
// ends a Wait that nothing rings.
func TestDoorbellRings(t *testing.T) {
	host, plugin := doorbellPair(t)
	if n := pending(t, plugin); n != 0 {
		t.Fatalf("a new doorbell has %d rings pending", n)
	}
	host.Ring()
	var err error
	waitReturns(t, "Wait after a ring", func() { err = plugin.Wait() })
	if err != nil {
		t.Fatal(err)
	}
	if n := pending(t, plugin); n != 0 {
		t.Fatalf("Wait left %d rings pending", n)
	}
	// Nothing rang: only Interrupt ends this Wait.
	got := make(chan error, 1)
	go func() { got <- plugin.Wait() }()
	plugin.Interrupt()
	select {
	case err := <-got:
		if err == nil {
			t.Fatal("an interrupted Wait returned no error")
		}
	case <-time.After(testbin.WaitLimit):
		t.Fatal("Interrupt did not end the Wait")
	}
}

// TestOpenDoorbellRefusesOtherFiles: a descriptor that is not an eventfd
// is refused, with ErrInvalidArgument.
func TestOpenDoorbellRefusesOtherFiles(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := OpenDoorbell(r); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("a pipe as the doorbell: %v, want ErrInvalidArgument", err)
	}
}

// TestNotifySQRingsOnlyASleeperOnTheBell: the host rings the doorbell
// when the plugin's sleeper raised SQBell, and not when a goroutine
// spins on the SQ or nothing waits on the bell.
func TestNotifySQRingsOnlyASleeperOnTheBell(t *testing.T) {
	l := Layout{SQEntries: 32, CQEntries: 16, SlotSize: 4096, ArenaSlots: 4}
	mem := make([]byte, l.Size()+64)
	off := (64 - int(uintptr(unsafe.Pointer(&mem[0]))%64)) % 64
	hostSide, err := Attach(mem[off:off+l.Size()], l)
	if err != nil {
		t.Fatal(err)
	}
	pluginSide, err := Attach(mem[off:off+l.Size()], l)
	if err != nil {
		t.Fatal(err)
	}
	hostBell, pluginBell := doorbellPair(t)
	hostSide.SetDoorbell(hostBell)

	for _, tc := range []struct {
		name       string
		bell, spin uint32
		rings      bool
	}{
		{"nothing waits on the bell", 0, 0, false},
		{"the sleeper waits on the bell", 1, 0, true},
		{"a goroutine spins on the SQ", 1, 1, false},
	} {
		pluginSide.Store(SQBell, tc.bell)
		pluginSide.Store(SQSpin, tc.spin)
		hostSide.Store(SQTail, hostSide.Load(SQTail)+1)
		hostSide.NotifySQ()
		if rang := pending(t, pluginBell) != 0; rang != tc.rings {
			t.Errorf("%s: rang %v, want %v", tc.name, rang, tc.rings)
		}
	}

	// SleepOnBell returns without waiting when the tail moved past what
	// the sleeper saw, and lowers SQBell.
	pluginSide.Store(SQSpin, 0)
	seen := pluginSide.Load(SQTail) - 1
	waitReturns(t, "SleepOnBell with a submission unclaimed", func() {
		pluginSide.SleepOnBell(pluginBell, seen, func() bool { return false })
	})
	if pluginSide.Load(SQBell) != 0 {
		t.Fatal("SleepOnBell left SQBell raised")
	}
	// And it wakes when the host rings for a new submission.
	seen = pluginSide.Load(SQTail)
	done := make(chan struct{})
	go func() {
		pluginSide.SleepOnBell(pluginBell, seen, func() bool { return false })
		close(done)
	}()
	testbin.Eventually(t, "the sleeper to raise SQBell", func() bool { return pluginSide.Load(SQBell) == 1 })
	hostSide.Store(SQTail, seen+1)
	hostSide.NotifySQ()
	select {
	case <-done:
	case <-time.After(testbin.WaitLimit):
		t.Fatal("the host's NotifySQ did not wake the sleeper on the bell")
	}
}
