//go:build !linux

package testbin

import "testing"

// Stop needs /proc to tell a stopped process: tests that stop a target
// run on Linux only.
func Stop(t testing.TB, pid int, group bool) {
	t.Skip("stopping a process and waiting for it to stop needs Linux's /proc")
}
