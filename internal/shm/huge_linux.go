//go:build linux

package shm

import (
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// Large regions ask for transparent huge pages. A data path that walks a
// region of hundreds of MiB in 4 KiB pages misses the TLB on nearly
// every op, and on a virtual machine a miss can cost microseconds: on an
// AMD EPYC VM (2 vCPUs) one 4 KiB WRITE between two processes took
// 50.5 µs through the tcp plugin and 37.5 µs in-process with 512 MiB
// regions, 36.4 and 31.5 µs once the same regions were in 2 MiB pages
// (docs/DATAPATH-ROUNDS.md, eleventh round).
//
// A memfd is shmem, whose huge pages the administrator allows in
// /sys/kernel/mm/transparent_hugepage/shmem_enabled: "always" and
// "within_size" give them to every mapping, "advise" to mappings that
// ask with madvise(MADV_HUGEPAGE), "never" (the kernel's default) to
// none. So every mapping of a region asks before its pages are faulted
// in (the folio size is chosen at the first fault, by whichever process
// makes it), which costs nothing where the setting refuses. Segments made
// in pieces (slabs, rings) do not ask: their pieces are freed by
// punching holes, which would split huge pages.

// hugeMin is the smallest mapping that asks for huge pages: one huge
// page (2 MiB on x86-64 and arm64 with 4 KiB pages).
const hugeMin = 2 << 20

// AdviseHuge asks for transparent huge pages on the whole pages of mem,
// before they are faulted in: what a region's mappings do, for other
// memory that should get the same pages (the bench's raw baseline). It
// is best effort: a kernel without THP refuses (EINVAL), and the memory
// keeps small pages. Less than one huge page is left alone.
func AdviseHuge(mem []byte) {
	if len(mem) < hugeMin {
		return
	}
	page := uintptr(unix.Getpagesize())
	start := (uintptr(unsafePointer(mem)) + page - 1) &^ (page - 1)
	end := (uintptr(unsafePointer(mem)) + uintptr(len(mem))) &^ (page - 1)
	if end > start {
		unix.Syscall(unix.SYS_MADVISE, start, end-start, unix.MADV_HUGEPAGE)
	}
}

// populateWrite faults every page of mem (page aligned) in for writing,
// as MAP_POPULATE would have. It fails on kernels before 5.14, which lack
// MADV_POPULATE_WRITE.
func populateWrite(mem []byte) error {
	if len(mem) == 0 {
		return nil
	}
	return unix.Madvise(mem, unix.MADV_POPULATE_WRITE)
}

// ShmemHuge reports this machine's shmem_enabled setting (the bracketed
// word of ShmemHugeFile: always, within_size, advise, never, deny or
// force) and whether kvconnect's regions get huge pages under it; ok is
// false when the file is missing (a kernel without THP) or unreadable.
func ShmemHuge() (setting string, huge bool, ok bool) {
	b, err := os.ReadFile(ShmemHugeFile)
	if err != nil {
		return "", false, false
	}
	setting = bracketed(string(b))
	switch setting {
	case "always", "within_size", "advise", "force":
		return setting, true, true
	case "":
		return "", false, false
	}
	return setting, false, true
}

// bracketed returns the word of a sysfs choice list that is in brackets
// ("always [never]" -> "never"), or "".
func bracketed(s string) string {
	i := strings.IndexByte(s, '[')
	j := strings.IndexByte(s, ']')
	if i < 0 || j < i {
		return ""
	}
	return s[i+1 : j]
}
