//go:build linux

package ring

import (
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The futex(2) operations (linux/futex.h), without FUTEX_PRIVATE_FLAG:
// the word is shared between processes.
const (
	futexOpWait = 0
	futexOpWake = 1
)

// Supported reports whether rings work on this platform: they need a
// futex on shared memory.
const Supported = true

// futexWait sleeps while *addr == val, until a futexWake on the same word
// (from any process mapping it), a signal, or d (when d > 0) passes,
// keeping or handing off its processor as how says. The word lives in
// shared memory, so the futex is not FUTEX_PRIVATE_FLAG. Spurious
// returns are allowed: callers recheck.
func futexWait(addr *uint32, val uint32, d time.Duration, how Wait) {
	if how == Handoff {
		var ts syscall.Timespec
		if d > 0 {
			ts = syscall.NsecToTimespec(d.Nanoseconds())
		}
		futexWaitHandoff(addr, val, ts, d > 0)
		return
	}
	var ts *unix.Timespec
	if d > 0 {
		t := unix.NsecToTimespec(d.Nanoseconds())
		ts = &t
	}
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexOpWait, uintptr(val), uintptr(unsafe.Pointer(ts)), 0, 0)
}

// futexWake wakes up to n sleepers on addr. FUTEX_WAKE never blocks, so
// it is a raw system call: through the runtime's (syscall.Syscall) it
// would wake the runtime's monitor thread (sysmon) whenever that slept
// deeply, restarting its 20 µs polling, each poll a thread wake-up that
// preempts whatever ran on that vCPU: once per completion in a plugin
// that posts them (docs/DATAPATH-ROUNDS.md, nineteenth round).
func futexWake(addr *uint32, n int) {
	unix.RawSyscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexOpWake, uintptr(n), 0, 0, 0)
}
