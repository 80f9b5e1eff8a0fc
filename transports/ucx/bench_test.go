//go:build linux && cgo

package ucx_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"
	"unsafe"

	"github.com/kvconnect/kvconnect/internal/shm"
	"github.com/kvconnect/kvconnect/internal/testbin"
	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/plugins/host"
	"github.com/kvconnect/kvconnect/transports/tcp"
	"github.com/kvconnect/kvconnect/transports/ucx"
)

// BenchmarkWrite64x1MiB moves the same batch (64 WRITEs of 1 MiB between
// two nodes on this host) through ucx over shared-memory lanes, ucx over
// UCX's tcp lanes, ucx with UCX's default lane list, and the tcp transport, each in-process and as plugin
// processes, so the same-host fast path can be compared with tcp:
//
//	go test -run '^$' -bench Write64x1MiB -count 5 ./transports/ucx/
func BenchmarkWrite64x1MiB(b *testing.B) {
	const nops, size = 64, 1 << 20
	variants := []struct {
		name, plugin string
		opts         map[string]any
		newT         func() plugins.Transport
	}{
		{"ucx-sm", "ucx", map[string]any{"tls": "sm"}, func() plugins.Transport { return ucx.New() }},
		{"ucx-default", "ucx", nil, func() plugins.Transport { return ucx.New() }}, // UCX picks: shared memory on one host
		{"ucx-tcp", "ucx", map[string]any{"tls": "tcp"}, func() plugins.Transport { return ucx.New() }},
		{"tcp", "tcp", nil, func() plugins.Transport { return tcp.New() }},
	}
	for _, mode := range []string{"inproc", "plugin"} {
		for _, v := range variants {
			b.Run(v.name+"/"+mode, func(b *testing.B) {
				mk := v.newT
				if mode == "plugin" {
					bin, err := testbin.Build("./cmd/kvconnect-transport-"+v.plugin, "kvconnect-transport-"+v.plugin)
					if err != nil {
						b.Fatal(err)
					}
					mk = func() plugins.Transport {
						p, err := host.Launch(context.Background(), host.LaunchConfig{Name: v.plugin, Path: bin})
						if err != nil {
							b.Fatal(err)
						}
						return p
					}
				}
				opts, _ := json.Marshal(v.opts)
				src := benchNode(b, mk(), opts, nops*size)
				dst := benchNode(b, mk(), opts, nops*size)
				ctx := context.Background()
				peer, err := src.t.Connect(ctx, dst.info())
				if err != nil {
					b.Fatal(err)
				}
				ops := make([]plugins.Op, nops)
				for i := range ops {
					ops[i] = plugins.Op{Kind: plugins.OpWrite, LocalRegion: 1, LocalOffset: uint64(i * size), RemoteRegion: 1, RemoteOffset: uint64(i * size), Length: size}
				}
				res := make([]plugins.OpResult, nops)
				run := func() {
					if err := src.t.Transfer(ctx, peer, ops, res); err != nil {
						b.Fatal(err)
					}
					for _, r := range res {
						if r.Err != nil {
							b.Fatal(r.Err)
						}
					}
				}
				run() // warm up: connections, registration caches, page faults
				b.SetBytes(nops * size)
				b.ResetTimer()
				start := time.Now()
				for i := 0; i < b.N; i++ {
					run()
				}
				b.ReportMetric(float64(b.N)*nops*size/time.Since(start).Seconds()/1e9, "GB/s")
			})
		}
	}
}

type bnode struct {
	t   plugins.Transport
	seg *shm.Segment
	key []byte
	ep  []byte
}

func (n *bnode) info() plugins.PeerInfo {
	mem := n.seg.Bytes()
	return plugins.PeerInfo{Name: "bench", Endpoint: n.ep, Regions: []plugins.RemoteRegion{
		{ID: 1, Addr: uint64(uintptr(unsafe.Pointer(&mem[0]))), Size: uint64(len(mem)), Key: n.key}}}
}

func benchNode(b *testing.B, t plugins.Transport, opts []byte, size int) *bnode {
	ctx := context.Background()
	res, err := t.Init(ctx, plugins.InitRequest{Hostname: "127.0.0.1", Options: opts})
	if err != nil {
		b.Fatal(err)
	}
	seg, err := shm.New("bench", size)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		t.Close(context.Background())
		seg.Close()
	})
	mem := seg.Bytes()
	key, err := t.RegisterRegion(ctx, plugins.Region{ID: 1, Addr: uint64(uintptr(unsafe.Pointer(&mem[0]))), Mem: mem, File: seg.File()})
	if err != nil {
		b.Fatal(err)
	}
	return &bnode{t: t, seg: seg, key: key, ep: res.Endpoint}
}
