//go:build !unix

package ascend

import "syscall"

// accessRW is not checked off Unix: there are no Ascend device nodes.
func accessRW(path string) error { return nil }

// errnoName has no symbolic names off Unix.
func errnoName(e syscall.Errno) string { return "" }
