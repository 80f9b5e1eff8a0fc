//go:build linux

package host

import (
	"os/exec"
	"syscall"
)

// bindToParent makes the kernel kill the plugin if the host dies without
// closing it, so a crashed host leaves no plugin process behind.
func bindToParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
