//go:build linux

package callermem

import (
	"bytes"
	"errors"
	"os"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/kvconnect/kvconnect/errdefs"
)

var pageSize = unix.Getpagesize()

// anon maps n bytes of private anonymous memory (what malloc hands out
// for large buffers), unmapped at the end of the test.
func anon(t *testing.T, n int) []byte {
	t.Helper()
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(b) })
	return b
}

// peerView maps a lease's bytes a second time, as a plugin process does
// with the file it receives.
func peerView(t *testing.T, l *Lease, n int) []byte {
	t.Helper()
	page := uint64(pageSize)
	start := l.Offset &^ (page - 1)
	m, err := unix.Mmap(int(l.File.Fd()), int64(start), int(l.Offset-start)+n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(m) })
	return m[l.Offset-start:]
}

func addrOf(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b)))) }

// mapping is the /proc/self/maps line holding addr.
func mapping(t *testing.T, addr uint64) vma {
	t.Helper()
	vmas, err := readMaps(addr, addr+1)
	if err != nil || len(vmas) != 1 {
		t.Fatalf("maps at 0x%x: %v %v", addr, vmas, err)
	}
	return vmas[0]
}

func TestShareMovesPrivateMemoryInPlace(t *testing.T) {
	mem := anon(t, 8*pageSize)
	buf := mem[100 : 5*pageSize+7] // unaligned at both ends, like a heap buffer
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	mem[10] = 0xAA // a neighbour in the first page
	l, err := Share(buf)
	if err != nil {
		t.Fatal(err)
	}
	if l.How != "arena" || l.Offset != addrOf(buf) {
		t.Fatalf("lease %+v, want the arena at offset 0x%x", l, addrOf(buf))
	}
	if v := mapping(t, addrOf(buf)); !v.shared {
		t.Fatalf("after Share the buffer is mapped %v, want shared", v)
	}
	// Contents kept, neighbours too, and the other process's view is the same memory.
	for i := range buf {
		if buf[i] != byte(i*7) {
			t.Fatalf("byte %d changed by Share", i)
		}
	}
	if mem[10] != 0xAA {
		t.Fatal("a neighbour byte in the first page changed")
	}
	view := peerView(t, l, len(buf))
	if !bytes.Equal(view[:len(buf)], buf) {
		t.Fatal("the file's view differs from the memory")
	}
	view[3] = 0x5C // a peer's write lands in the caller's memory
	if buf[3] != 0x5C {
		t.Fatal("a write through the file is not seen at the caller's address")
	}
	buf[4] = 0x6D // the caller's write reaches the peer
	if view[4] != 0x6D {
		t.Fatal("a write at the caller's address is not seen through the file")
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(); err != nil {
		t.Fatalf("second Release: %v", err)
	}
	if v := mapping(t, addrOf(buf)); v.shared {
		t.Fatalf("after Release the buffer is mapped %v, want private", v)
	}
	if buf[3] != 0x5C || buf[4] != 0x6D || buf[5] != byte(5*7) || mem[10] != 0xAA {
		t.Fatal("Release lost the memory's contents")
	}
	buf[5] = 1
	if view[5] == 1 {
		t.Fatal("after Release the caller's writes still reach the file")
	}
	if fd, ranges := Held(); fd != -1 || ranges != nil {
		t.Fatalf("after the last Release Held = %d, %v, want nothing", fd, ranges)
	}
}

func TestShareGoHeapSlice(t *testing.T) {
	buf := make([]byte, 256<<10) // large: the Go allocator gives it pages of its own
	for i := range buf {
		buf[i] = byte(i)
	}
	l, err := Share(buf)
	if err != nil {
		t.Fatal(err)
	}
	view := peerView(t, l, len(buf))
	view[len(buf)-1] = 0xEE
	if buf[len(buf)-1] != 0xEE || buf[1000] != byte(1000%256) {
		t.Fatal("Go slice not shared in place")
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	if buf[len(buf)-1] != 0xEE || buf[1000] != byte(1000%256) {
		t.Fatal("contents lost")
	}
}

func TestShareNeighboursInOnePage(t *testing.T) {
	mem := anon(t, 2*pageSize)
	a, b := mem[0:1000], mem[1000:3000] // two buffers in the first page
	a[0], b[0] = 1, 2
	la, err := Share(a)
	if err != nil {
		t.Fatal(err)
	}
	lb, err := Share(b)
	if err != nil {
		t.Fatal(err)
	}
	vb := peerView(t, lb, len(b))
	if err := la.Release(); err != nil {
		t.Fatal(err)
	}
	// b still holds the page: it stays shared.
	vb[1] = 9
	if b[1] != 9 || !mapping(t, addrOf(b)).shared {
		t.Fatal("releasing a unshared the page b still holds")
	}
	if err := lb.Release(); err != nil {
		t.Fatal(err)
	}
	if mapping(t, addrOf(b)).shared || b[1] != 9 || a[0] != 1 || b[0] != 2 {
		t.Fatal("the page did not go back to private memory with its contents")
	}
}

func TestShareKeepsZeroPagesSparse(t *testing.T) {
	mem := anon(t, 64*pageSize)
	mem[5*pageSize] = 1
	l, err := Share(mem)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	var data int
	fd := int(l.File.Fd())
	for off := int64(addrOf(mem)); off < int64(addrOf(mem))+int64(len(mem)); {
		d, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if err != nil || d >= int64(addrOf(mem))+int64(len(mem)) {
			break
		}
		h, _ := unix.Seek(fd, d, unix.SEEK_HOLE)
		data += int(h - d)
		off = h
	}
	if data != pageSize {
		t.Fatalf("%d bytes of the arena hold data, want one page (zero pages stay holes)", data)
	}
}

func TestShareSharedFileMapping(t *testing.T) {
	// MAP_SHARED|MAP_ANONYMOUS: Python's mmap.mmap(-1, n).
	mem, err := unix.Mmap(-1, 0, 4*pageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	l, err := Share(mem[10:3000])
	if os.Geteuid() != 0 && errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Skipf("opening an anonymous shared mapping's file needs CAP_CHECKPOINT_RESTORE: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	if l.How != "file" || l.Offset != 10 {
		t.Fatalf("lease %+v, want the mapping's own file at offset 10", l)
	}
	view := peerView(t, l, 100)
	view[0] = 42
	if mem[10] != 42 {
		t.Fatal("the file does not back the memory")
	}
	if mapping(t, addrOf(mem)).inode == 0 {
		t.Fatal("a shared mapping has no inode")
	}
}

func TestShareRefusesBadMemory(t *testing.T) {
	ro, err := unix.Mmap(-1, 0, pageSize, unix.PROT_READ, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(ro)
	rwx, err := unix.Mmap(-1, 0, pageSize, unix.PROT_READ|unix.PROT_WRITE|unix.PROT_EXEC, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(rwx)
	disk, err := os.CreateTemp(t.TempDir(), "disk")
	if err != nil {
		t.Fatal(err)
	}
	disk.Truncate(int64(pageSize))
	onDisk, err := unix.Mmap(int(disk.Fd()), 0, pageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(onDisk)
	// Three pages with a hole in the middle (mapped last, so no later
	// mapping of this test lands in the hole).
	three := anon(t, 3*pageSize)
	if _, _, e := unix.Syscall(unix.SYS_MUNMAP, uintptr(addrOf(three))+uintptr(pageSize), uintptr(pageSize), 0); e != 0 {
		t.Fatal(e)
	}
	gone := three[pageSize : 2*pageSize]
	pastEnd := three[:2*pageSize]
	for name, mem := range map[string][]byte{
		"read-only":             ro,
		"executable (JIT code)": rwx,
		"unmapped":              gone,
		"a file on disk":        onDisk,
		"past a mapping's end":  pastEnd,
		"empty":                 three[:0],
	} {
		l, err := Share(mem)
		if !errors.Is(err, errdefs.ErrInvalidArgument) {
			if l != nil {
				l.Release()
			}
			t.Errorf("%s: err %v, want ErrInvalidArgument", name, err)
			continue
		}
		t.Logf("%s: %v", name, err)
	}
	if fd, _ := Held(); fd != -1 {
		t.Fatal("a refused Share left the arena open")
	}
}
