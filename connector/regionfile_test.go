package connector_test

import (
	"bytes"
	"context"
	"errors"
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
