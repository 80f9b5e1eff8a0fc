//go:build linux

package bench

import (
	"fmt"
	"os"
	"syscall"

	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/kvconnect/kvconnect/internal/shm"
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

// regionsHuge reports whether kvconnect's regions get huge pages here
// (shared memory's transparent huge page setting allows them).
func regionsHuge() bool {
	_, huge, _ := shm.ShmemHuge()
	return huge
}

// adviseHuge asks for transparent huge pages on the whole pages of b,
// before they are faulted in; best effort.
func adviseHuge(b []byte) {
	page := uintptr(unix.Getpagesize())
	start := (uintptr(unsafe.Pointer(unsafe.SliceData(b))) + page - 1) &^ (page - 1)
	end := (uintptr(unsafe.Pointer(unsafe.SliceData(b))) + uintptr(len(b))) &^ (page - 1)
	if end > start {
		unix.Syscall(unix.SYS_MADVISE, start, end-start, unix.MADV_HUGEPAGE)
	}
}

// pageSetting says which pages the suite's memory gets here.
func pageSetting() string {
	setting, huge, ok := shm.ShmemHuge()
	switch {
	case !ok:
		return "4 KiB (no transparent huge pages in this kernel)"
	case huge:
		return fmt.Sprintf("2 MiB for regions and the raw baseline's buffers (%s is %s; docs/DATAPATH.md, eleventh round)", shm.ShmemHugeFile, setting)
	}
	return fmt.Sprintf("4 KiB for regions and the raw baseline's buffers (%s is %s; `echo advise >` it gives both 2 MiB pages; docs/DATAPATH.md, eleventh round)", shm.ShmemHugeFile, setting)
}
