//go:build linux

package shm

import (
	"testing"

	"golang.org/x/sys/unix"
)

// TestPopulateSaysWhenPagesCannotBeBacked: Populate faults pages in, and
// says so when some cannot be (here: past the end of the file, where an
// access is SIGBUS, as it is in a sparse file on a full tmpfs): the
// callers then refuse the memory rather than register it.
func TestPopulateSaysWhenPagesCannotBeBacked(t *testing.T) {
	page := unix.Getpagesize()
	f := memfd(t, 0, int64(page), 0) // one page of file
	mem, err := unix.Mmap(int(f.Fd()), 0, 4*page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	if err := unix.Madvise(mem[:page], unix.MADV_POPULATE_WRITE); err == unix.EINVAL {
		t.Skip("this kernel lacks MADV_POPULATE_WRITE (before 5.14): Populate does nothing there")
	}
	if err := Populate(mem[:page]); err != nil {
		t.Fatalf("Populate of the file's page: %v", err)
	}
	if err := Populate(mem[page:]); err == nil {
		t.Fatal("Populate of pages past the file's end: nil, want an error (an access there is SIGBUS)")
	} else {
		t.Log(err)
	}
}
