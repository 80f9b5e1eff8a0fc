package connector_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/kvconnect/kvconnect/connector"
)

// sealedMemfd is a caller's own memfd of size bytes, sealed against
// shrinking, and the caller's own mapping of it.
func sealedMemfd(t *testing.T, size int) (*os.File, []byte) {
	t.Helper()
	fd, err := unix.MemfdCreate("caller-kv", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "memfd:caller-kv")
	t.Cleanup(func() { f.Close() })
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		t.Fatal(err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK); err != nil {
		t.Fatal(err)
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(mem) })
	return f, mem
}

// TestRegisterCallerMemfd: a range of a memfd the caller owns is
// registered (at an unaligned offset), a peer writes into it through the
// tcp plugin, and the caller sees the bytes in its own mapping.
func TestRegisterCallerMemfd(t *testing.T) {
	ctx := context.Background()
	a, b := newNode(t), newNode(t)
	const size, off, n = 4 << 20, 4096 + 13, 1 << 20
	f, mine := sealedMemfd(t, size)
	r, err := b.RegisterFile(ctx, f, off, n)
	if err != nil {
		t.Fatal(err)
	}
	if r.Len() != n {
		t.Fatalf("region of %d bytes, want %d", r.Len(), n)
	}
	f.Close() // the node keeps its own descriptor
	src := alloc(t, a, n)
	for i := range src.Bytes() {
		src.Bytes()[i] = byte(i*7 + 3)
	}
	if err := a.TransferSyncWrite(ctx, b.SessionID(), src.Addr(), r.Addr(), n); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(mine[off:off+n], src.Bytes()) {
		t.Fatal("the caller's mapping does not hold the bytes the peer wrote")
	}
	if mine[off-1] != 0 || mine[off+n] != 0 {
		t.Fatal("bytes outside the registered range changed")
	}
	// The region is published like an allocated one.
	peer, err := a.Open(ctx, b.SessionID())
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, rr := range peer.Regions() {
		found = found || (rr.ID == r.ID() && rr.Addr == r.Addr() && rr.Len == n)
	}
	if !found {
		t.Fatalf("region %d not in the peer's view %+v", r.ID(), peer.Regions())
	}
	if err := r.Free(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestRegisterFileRefusals(t *testing.T) {
	ctx := context.Background()
	c := newNode(t)
	disk, err := os.CreateTemp(t.TempDir(), "kv")
	if err != nil {
		t.Fatal(err)
	}
	defer disk.Close()
	disk.Truncate(1 << 20)
	var sfs unix.Statfs_t
	if unix.Fstatfs(int(disk.Fd()), &sfs); int64(sfs.Type) == unix.TMPFS_MAGIC {
		t.Skipf("%s is tmpfs here: no disk file system to refuse", os.TempDir())
	}
	fd, err := unix.MemfdCreate("unsealed", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		t.Fatal(err)
	}
	unsealed := os.NewFile(uintptr(fd), "memfd:unsealed")
	defer unsealed.Close()
	unix.Ftruncate(fd, 1<<20)
	sealed, _ := sealedMemfd(t, 1<<20)
	for _, tc := range []struct {
		name string
		f    *os.File
		off  uint64
		n    int
		says string
	}{
		{"disk file", disk, 0, 4096, "file on disk cannot be shared"},
		{"unsealed memfd", unsealed, 0, 4096, "F_SEAL_SHRINK"},
		{"past the end", sealed, 1 << 19, 1<<19 + 1, "runs past its end"},
		{"empty", sealed, 0, 0, "out of range"},
	} {
		_, err := c.RegisterFile(ctx, tc.f, tc.off, tc.n)
		if !errors.Is(err, connector.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: got %v, want ErrInvalidArgument saying %q", tc.name, err, tc.says)
		}
	}
	if st := c.Status(); st.Regions != 0 {
		t.Fatalf("refused files left %d regions registered", st.Regions)
	}
}

// TestRegisterFileSharesOneView: a thousand regions of one caller memfd
// cost the node one descriptor and one mapping (however many descriptors
// the caller opens for the file), and the plugin likewise; a range
// overlapping a registered one is refused; the view goes once its last
// region is freed.
func TestRegisterFileSharesOneView(t *testing.T) {
	ctx := context.Background()
	a, b := newNode(t), newNode(t)
	const n, size = 1000, 4096
	f, mine := sealedMemfd(t, n*size+size)
	other, err := os.OpenFile(fmt.Sprintf("/proc/self/fd/%d", f.Fd()), os.O_RDWR, 0) // another descriptor, same file
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	held := func(pid int) (fds, maps int) {
		ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		for _, e := range ents {
			if l, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, e.Name())); strings.HasPrefix(l, "/memfd:caller-kv") {
				fds++
			}
		}
		m, _ := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
		return fds, strings.Count(string(m), "/memfd:caller-kv")
	}
	plugin := b.Status().PluginPID
	fds0, maps0 := held(os.Getpid())
	regions := make([]*connector.Region, n)
	for i := range regions {
		via := f
		if i%2 == 1 {
			via = other
		}
		if regions[i], err = b.RegisterFile(ctx, via, uint64(i*size+i%size), size); err != nil {
			t.Fatalf("region %d: %v", i, err)
		}
	}
	fds, maps := held(os.Getpid())
	pfds, pmaps := held(plugin)
	if fds-fds0 != 1 || maps-maps0 != 1 || pfds != 1 || pmaps != 1 {
		t.Fatalf("%d regions of one file: the node holds %d more descriptors and %d more mappings of it, the plugin %d and %d; want one each", n, fds-fds0, maps-maps0, pfds, pmaps)
	}
	if _, err := b.RegisterFile(ctx, f, size/2, size); !errors.Is(err, connector.ErrInvalidArgument) {
		t.Fatalf("a range overlapping a registered one: %v, want ErrInvalidArgument", err)
	}
	// A peer writes into one of them through the plugin; the caller sees it.
	src := alloc(t, a, size)
	for i := range src.Bytes() {
		src.Bytes()[i] = byte(i*5 + 1)
	}
	r := regions[321]
	if err := a.TransferSyncWrite(ctx, b.SessionID(), src.Addr(), r.Addr(), size); err != nil {
		t.Fatal(err)
	}
	if off := 321*size + 321; !bytes.Equal(mine[off:off+size], src.Bytes()) {
		t.Fatal("the caller's mapping does not hold the bytes the peer wrote")
	}
	for i, r := range regions {
		if err := r.Free(ctx); err != nil {
			t.Fatalf("free %d: %v", i, err)
		}
		if i == n-2 {
			if fds, _ := held(os.Getpid()); fds-fds0 != 1 {
				t.Fatal("the view closed before its last region was freed")
			}
		}
	}
	fds, maps = held(os.Getpid())
	pfds, pmaps = held(plugin)
	if fds != fds0 || maps != maps0 || pfds != 0 || pmaps != 0 {
		t.Fatalf("after freeing every region the node holds %d more descriptors and %d more mappings, the plugin %d and %d", fds-fds0, maps-maps0, pfds, pmaps)
	}
}
