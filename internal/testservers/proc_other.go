//go:build !linux

package testservers

import "syscall"

// sysProcAttr: no parent-death signal outside Linux; t.Cleanup stops the server.
func sysProcAttr() *syscall.SysProcAttr { return nil }
