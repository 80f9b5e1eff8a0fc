package efa_test

import (
	"context"
	"fmt"
	"testing"
	"time"
	"unsafe"

	"github.com/kvconnect/kvconnect/internal/shm"
	"github.com/kvconnect/kvconnect/internal/testbin"
	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/plugins/host"
	"github.com/kvconnect/kvconnect/transports/efa"
	"github.com/kvconnect/kvconnect/transports/tcp"
)

// benchTransports are compared side by side: efa over the tcp;ofi_rxm
// software provider (the code that runs on EFA) against the pure-Go tcp
// transport, with the same batch, on loopback. efa over shm is there for
// reference.
var benchTransports = []struct {
	name   string
	plugin string // binary for plugin mode
	pkg    string
	new    func() plugins.Transport
	opts   string
}{
	{"efa-tcp_rxm", "kvconnect-transport-efa", "./cmd/kvconnect-transport-efa", func() plugins.Transport { return efa.New() }, `{"provider":"tcp;ofi_rxm","domain":"lo"}`},
	{"tcp", "kvconnect-transport-tcp", "./cmd/kvconnect-transport-tcp", func() plugins.Transport { return tcp.New() }, ``},
	{"efa-shm", "kvconnect-transport-efa", "./cmd/kvconnect-transport-efa", func() plugins.Transport { return efa.New() }, `{"provider":"shm"}`},
}

// BenchmarkBlocks1MiB writes (and reads) batches of 64 blocks of 1 MiB
// from one node to another: go test -bench Blocks1MiB -benchtime 100x.
func BenchmarkBlocks1MiB(b *testing.B) {
	const blocks, size = 64, 1 << 20
	for _, mode := range []string{"inproc", "plugin"} {
		for _, kind := range []plugins.OpKind{plugins.OpWrite, plugins.OpRead} {
			for _, tr := range benchTransports {
				b.Run(fmt.Sprintf("%s/%s/%s", mode, kind, tr.name), func(b *testing.B) {
					newT := func() plugins.Transport { return tr.new() }
					if mode == "plugin" {
						bin, err := testbin.Build(tr.pkg, tr.plugin)
						if err != nil {
							b.Fatal(err)
						}
						newT = func() plugins.Transport {
							p, err := host.Launch(context.Background(), host.LaunchConfig{Name: tr.name, Path: bin})
							if err != nil {
								b.Fatal(err)
							}
							return p
						}
					}
					a := newBenchNode(b, newT(), tr.opts, blocks*size)
					t := newBenchNode(b, newT(), tr.opts, blocks*size)
					ctx := context.Background()
					peer, err := a.t.Connect(ctx, plugins.PeerInfo{Name: "target", Endpoint: t.endpoint,
						Regions: []plugins.RemoteRegion{{ID: 1, Addr: t.addr, Size: blocks * size, Key: t.key}}})
					if err != nil {
						b.Fatal(err)
					}
					ops := make([]plugins.Op, blocks)
					for i := range ops {
						off := uint64(i * size)
						ops[i] = plugins.Op{Kind: kind, LocalRegion: 1, LocalOffset: off, RemoteRegion: 1, RemoteOffset: off, Length: size}
					}
					res := make([]plugins.OpResult, blocks)
					run := func() {
						if err := a.t.Transfer(ctx, peer, ops, res); err != nil {
							b.Fatal(err)
						}
						for i, r := range res {
							if r.Err != nil {
								b.Fatalf("op %d: %v", i, r.Err)
							}
						}
					}
					run() // connect and warm up
					b.SetBytes(blocks * size)
					b.ResetTimer()
					start := time.Now()
					for i := 0; i < b.N; i++ {
						run()
					}
					b.ReportMetric(float64(b.N)*blocks*size/time.Since(start).Seconds()/1e9, "GB/s")
				})
			}
		}
	}
}

type benchNode struct {
	t        plugins.Transport
	seg      *shm.Segment
	endpoint []byte
	key      []byte
	addr     uint64
}

func newBenchNode(b *testing.B, tr plugins.Transport, opts string, size int) *benchNode {
	ctx := context.Background()
	res, err := tr.Init(ctx, plugins.InitRequest{Hostname: "127.0.0.1", Options: []byte(opts)})
	if err != nil {
		b.Fatal(err)
	}
	seg, err := shm.New("bench", size)
	if err != nil {
		b.Fatal(err)
	}
	n := &benchNode{t: tr, seg: seg, endpoint: res.Endpoint, addr: uint64(uintptr(unsafe.Pointer(&seg.Bytes()[0])))}
	b.Cleanup(func() {
		tr.Close(context.Background())
		seg.Close()
	})
	n.key, err = tr.RegisterRegion(ctx, plugins.Region{ID: 1, Addr: n.addr, Mem: seg.Bytes(), File: seg.File()})
	if err != nil {
		b.Fatal(err)
	}
	return n
}
