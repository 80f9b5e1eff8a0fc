//go:build !linux

package ring

import "time"

// Supported reports whether rings work on this platform: they need a
// futex on shared memory, so hosts here use gRPC Transfer.
const Supported = false

// futexWait sleeps briefly: rings are not used on this platform.
func futexWait(addr *uint32, val uint32, d time.Duration, how Wait) {
	if d <= 0 || d > time.Millisecond {
		d = time.Millisecond
	}
	time.Sleep(d)
}

// futexWake does nothing on this platform.
func futexWake(addr *uint32, n int) {}
