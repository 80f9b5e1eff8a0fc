package testservers

import "syscall"

// sysProcAttr makes the kernel kill the server when the test process dies.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
