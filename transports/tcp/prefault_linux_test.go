//go:build linux

package tcp_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/transports/tcp"
)

// A region is read by the kernel, every page, when it is registered
// (internal/prefault): an untouched anonymous mapping has every page
// resident afterwards. transports.tcp.prefault false, or a context that
// has ended, leaves the pages to their first op, and the region is
// registered all the same.
func TestRegisterRegionPrefaults(t *testing.T) {
	page := unix.Getpagesize()
	const pages = 300
	for _, tc := range []struct {
		name    string
		options map[string]any
		expired bool
		want    int
	}{
		{"default", nil, false, pages},
		{"prefault false", map[string]any{"prefault": false}, false, 0},
		{"deadline passed", nil, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
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
			var opts []byte
			if tc.options != nil {
				if opts, err = json.Marshal(tc.options); err != nil {
					t.Fatal(err)
				}
			}
			tr := tcp.New()
			ctx := context.Background()
			if _, err := tr.Init(ctx, plugins.InitRequest{Hostname: "127.0.0.1", Options: opts}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { tr.Close(ctx) })
			rctx := ctx
			if tc.expired {
				var cancel context.CancelFunc
				rctx, cancel = context.WithDeadline(ctx, time.Now().Add(-time.Second))
				defer cancel()
			}
			if _, err := tr.RegisterRegion(rctx, plugins.Region{ID: 1, Addr: uint64(uintptr(unsafe.Pointer(&m[0]))), Mem: m}); err != nil {
				t.Fatal(err)
			}
			if n := resident(); n != tc.want {
				t.Fatalf("%d of %d pages resident after RegisterRegion, want %d", n, pages, tc.want)
			}
			// Registered either way.
			if err := tr.DeregisterRegion(ctx, 1); err != nil {
				t.Fatalf("the region was not registered: %v", err)
			}
		})
	}
}
