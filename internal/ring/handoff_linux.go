//go:build linux

package ring

import (
	"syscall"
	"unsafe"
)

// The runtime's own entry to a system call known to block: it hands the
// processor off before the call instead of leaving it to sysmon.
// runtime/proc.go keeps both for callers outside the runtime ("Do not
// remove or change the type signature", go.dev/issue/67401); gVisor
// sleeps on its futexes the same way.
//
//go:linkname runtimeEntersyscallblock runtime.entersyscallblock
func runtimeEntersyscallblock()

//go:linkname runtimeExitsyscall runtime.exitsyscall
func runtimeExitsyscall()

// futexWaitHandoff is FUTEX_WAIT between entersyscallblock and
// exitsyscall, shaped as syscall.Syscall is: no stack growth, no race
// instrumentation and no allocation between the two (the goroutine has
// no processor then). ts is the timeout when timed.
//
//go:nosplit
//go:norace
func futexWaitHandoff(addr *uint32, val uint32, ts syscall.Timespec, timed bool) {
	var tsp uintptr
	if timed {
		tsp = uintptr(unsafe.Pointer(&ts))
	}
	runtimeEntersyscallblock()
	syscall.RawSyscall6(syscall.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexOpWait, uintptr(val), tsp, 0, 0)
	runtimeExitsyscall()
}
