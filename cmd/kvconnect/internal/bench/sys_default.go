//go:build !linux

package bench

import (
	"os"
	"syscall"
)

// childAttr puts a child in a process group of its own when group is
// set. Without Linux's parent-death signal a child outlives a bench that
// is killed; the bench stops its children when it exits normally.
func childAttr(group bool) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: group}
}

// isTerminal is not known here: no live progress line.
func isTerminal(*os.File) bool { return false }
