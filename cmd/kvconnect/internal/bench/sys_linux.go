//go:build linux

package bench

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// childAttr makes a child process die with this one (SIGKILL when the
// bench exits, however it exits), in a process group of its own when
// group is set (so its own children can be signalled with it).
func childAttr(group bool) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: group, Pdeathsig: syscall.SIGKILL}
}

// isTerminal reports whether f is a terminal.
func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
