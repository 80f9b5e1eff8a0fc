//go:build linux

package shm

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// hugetlbfsDir mounts a hugetlbfs for the test, reserving huge pages
// (the system's count is put back afterwards), or skips naming what is
// missing: the file system in the kernel, root, or free memory for them.
func hugetlbfsDir(t *testing.T, pages int) string {
	t.Helper()
	fss, err := os.ReadFile("/proc/filesystems")
	if err != nil || !strings.Contains(string(fss), "hugetlbfs") {
		t.Skip("this kernel has no hugetlbfs")
	}
	if os.Geteuid() != 0 {
		t.Skip("mounting hugetlbfs and reserving huge pages needs root")
	}
	const nr = "/proc/sys/vm/nr_hugepages"
	old, err := os.ReadFile(nr)
	if err != nil {
		t.Skipf("cannot read %s: %v", nr, err)
	}
	had, _ := strconv.Atoi(strings.TrimSpace(string(old)))
	if err := os.WriteFile(nr, []byte(strconv.Itoa(had+pages)), 0); err != nil {
		t.Skipf("cannot reserve huge pages (%s): %v", nr, err)
	}
	t.Cleanup(func() { os.WriteFile(nr, old, 0) })
	dir := t.TempDir()
	if err := unix.Mount("none", dir, "hugetlbfs", 0, ""); err != nil {
		t.Skipf("cannot mount hugetlbfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	var sfs unix.Statfs_t
	if err := unix.Statfs(dir, &sfs); err != nil || int64(sfs.Type) != unix.HUGETLBFS_MAGIC {
		t.Skipf("%s is not hugetlbfs after mounting it: %v", dir, err)
	}
	return dir
}

// mapped reports whether this process maps any part of path.
func mapped(t *testing.T, path string) bool {
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Contains(string(maps), path)
}

// TestMapsOfAHugetlbfsFile: regions and views of a file on hugetlbfs,
// at offsets and sizes that are not huge-page multiples, map (mmap
// refuses an offset inside a huge page), hold the file's bytes at the
// right place, and unmap whole on Close (munmap refuses a length that is
// not a huge-page multiple: the mapping stayed, and Close failed).
func TestMapsOfAHugetlbfsFile(t *testing.T) {
	dir := hugetlbfsDir(t, 4)
	path := filepath.Join(dir, "kv")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(int(f.Fd()), &sfs); err != nil {
		t.Fatal(err)
	}
	huge := int(sfs.Bsize)
	if err := f.Truncate(int64(2 * huge)); err != nil {
		t.Skipf("cannot size a file on hugetlbfs (no free huge pages?): %v", err)
	}
	whole, err := unix.Mmap(int(f.Fd()), 0, 2*huge, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Skipf("cannot map the file's huge pages (none free?): %v", err)
	}
	for i := range whole {
		whole[i] = byte(i*7 + i>>12)
	}
	page := unix.Getpagesize()
	for _, tc := range []struct {
		name   string
		view   bool
		offset uint64
		size   int
	}{
		{"region at 0, two small pages", false, 0, 2 * page},
		{"region inside a huge page", false, uint64(page) + 17, 3 * page},
		{"region across the two huge pages", false, uint64(huge - page), 2 * page},
		{"view at 0, two small pages", true, 0, 2 * page},
		{"view inside the second huge page", true, uint64(huge + 3*page), page},
		{"view of the whole file", true, 0, 2 * huge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := os.OpenFile(path, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			var s *Segment
			if tc.view {
				s, err = MapViewAt(g, tc.offset, tc.size)
			} else {
				s, err = Map(g, tc.offset, tc.size)
			}
			if err != nil {
				g.Close()
				t.Fatal(err)
			}
			mem := s.Bytes()
			want := whole[tc.offset : tc.offset+uint64(tc.size)]
			if len(mem) != tc.size || !bytes.Equal(mem, want) {
				t.Fatalf("the segment holds %d bytes, not the file's %d at offset %d", len(mem), tc.size, tc.offset)
			}
			mem[0] ^= 0xff
			if whole[tc.offset] != mem[0] {
				t.Fatal("a write through the segment did not reach the file")
			}
			mem[0] ^= 0xff
			if err := s.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
		})
	}
	unix.Munmap(whole)
	if mapped(t, path) {
		t.Fatal("a mapping of the file is left after every segment closed")
	}
}
