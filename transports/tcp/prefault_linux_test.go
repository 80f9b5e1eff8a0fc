//go:build linux

package tcp_test

import (
	"context"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/transports/tcp"
)

// A region is read by the kernel, every page, when it is registered
// (internal/prefault): an untouched anonymous mapping has every page
// resident afterwards.
func TestRegisterRegionPrefaults(t *testing.T) {
	page := unix.Getpagesize()
	const pages = 300
	m, err := unix.Mmap(-1, 0, pages*page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(m) })
	resident := func() int {
		vec := make([]byte, pages)
		if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
			t.Fatal(e)
		}
		n := 0
		for _, v := range vec {
			n += int(v & 1)
		}
		return n
	}
	if n := resident(); n != 0 {
		t.Fatalf("%d pages resident before", n)
	}
	tr := tcp.New()
	ctx := context.Background()
	if _, err := tr.Init(ctx, plugins.InitRequest{Hostname: "127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close(ctx) })
	if _, err := tr.RegisterRegion(ctx, plugins.Region{ID: 1, Addr: uint64(uintptr(unsafe.Pointer(&m[0]))), Mem: m}); err != nil {
		t.Fatal(err)
	}
	if n := resident(); n != pages {
		t.Fatalf("%d of %d pages resident after RegisterRegion", n, pages)
	}
}
