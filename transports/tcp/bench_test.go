package tcp_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"unsafe"

	"github.com/kvconnect/kvconnect/internal/shm"
	"github.com/kvconnect/kvconnect/internal/testbin"
	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/plugins/host"
	"github.com/kvconnect/kvconnect/transports/tcp"
)

// The benchmarks compare the tcp transport (in-process, both nodes in this
// process) with a plain Go TCP copy of the same shape: batches of 128
// blocks striped over 4 loopback connections. Run them side by side:
//
//	go test -run '^$' -bench 'Loopback' -count 5 ./transports/tcp | benchstat -col /impl -
const benchBatch = 128

var benchSizes = []int{4 << 10, 64 << 10, 1 << 20}

func BenchmarkLoopback(b *testing.B) {
	for _, size := range benchSizes {
		for _, op := range []string{"write", "read"} {
			b.Run(fmt.Sprintf("impl=raw/op=%s/block=%dKiB", op, size>>10), func(b *testing.B) { benchRaw(b, op, size) })
			b.Run(fmt.Sprintf("impl=tcp/op=%s/block=%dKiB", op, size>>10), func(b *testing.B) { benchTransport(b, op, size, false) })
			b.Run(fmt.Sprintf("impl=tcp-plugin/op=%s/block=%dKiB", op, size>>10), func(b *testing.B) { benchTransport(b, op, size, true) })
		}
	}
}

// BenchmarkSmallOpsAllocs shows allocations do not grow with the number of
// ops in a batch: allocs/op is per batch and stays flat from 8 to 512 ops.
func BenchmarkSmallOpsAllocs(b *testing.B) {
	for _, n := range []int{8, 128, 512} {
		b.Run(fmt.Sprintf("ops=%d", n), func(b *testing.B) {
			a, c := benchNode(b, false), benchNode(b, false)
			src, dst := a.alloc(b, n*4096), c.alloc(b, n*4096)
			peer, err := a.tr.Connect(context.Background(), plugins.PeerInfo{Name: "bench", Endpoint: c.endpoint})
			if err != nil {
				b.Fatal(err)
			}
			ops := make([]plugins.Op, n)
			for i := range ops {
				ops[i] = plugins.Op{Kind: plugins.OpWrite, LocalRegion: src, LocalOffset: uint64(i * 4096), RemoteRegion: dst, RemoteOffset: uint64(i * 4096), Length: 4096}
			}
			res := make([]plugins.OpResult, n)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := a.tr.Transfer(context.Background(), peer, ops, res); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkSingleOp measures one 4 KiB WRITE per batch, the round trip a
// lone op pays, in-process and through plugin processes (where the batch
// also crosses gRPC to the plugin and back).
func BenchmarkSingleOp(b *testing.B) {
	for _, v := range []struct {
		name   string
		plugin bool
	}{
		{"inproc", false},
		{"plugin", true},
	} {
		b.Run(v.name, func(b *testing.B) {
			a, c := benchNode(b, v.plugin), benchNode(b, v.plugin)
			src, dst := a.alloc(b, 4096), c.alloc(b, 4096)
			peer, err := a.tr.Connect(context.Background(), plugins.PeerInfo{Name: "bench", Endpoint: c.endpoint})
			if err != nil {
				b.Fatal(err)
			}
			ops := []plugins.Op{{Kind: plugins.OpWrite, LocalRegion: src, RemoteRegion: dst, Length: 4096}}
			res := make([]plugins.OpResult, 1)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := a.tr.Transfer(context.Background(), peer, ops, res); err != nil || res[0].Err != nil {
					b.Fatal(err, res[0].Err)
				}
			}
		})
	}
}

func benchTransport(b *testing.B, op string, size int, plugin bool) {
	a, c := benchNode(b, plugin), benchNode(b, plugin)
	src := a.alloc(b, benchBatch*size)
	dst := c.alloc(b, benchBatch*size)
	peer, err := a.tr.Connect(context.Background(), plugins.PeerInfo{Name: "bench", Endpoint: c.endpoint})
	if err != nil {
		b.Fatal(err)
	}
	kind := plugins.OpWrite
	if op == "read" {
		kind = plugins.OpRead
	}
	ops := make([]plugins.Op, benchBatch)
	for i := range ops {
		off := uint64(i * size)
		ops[i] = plugins.Op{Kind: kind, LocalRegion: src, LocalOffset: off, RemoteRegion: dst, RemoteOffset: off, Length: uint64(size)}
	}
	res := make([]plugins.OpResult, benchBatch)
	b.SetBytes(int64(benchBatch * size))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := a.tr.Transfer(context.Background(), peer, ops, res); err != nil {
			b.Fatal(err)
		}
		for _, r := range res {
			if r.Err != nil {
				b.Fatal(r.Err)
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N*benchBatch)/b.Elapsed().Seconds(), "ops/s")
}

type bnode struct {
	tr       plugins.Transport
	endpoint []byte
	next     plugins.RegionID
}

// benchNode starts a tcp transport in this process, or as a plugin process.
func benchNode(b testing.TB, plugin bool) *bnode {
	var tr plugins.Transport = tcp.New()
	if plugin {
		bin, err := testbin.Build("./cmd/kvconnect-transport-tcp", "kvconnect-transport-tcp")
		if err != nil {
			b.Fatal(err)
		}
		p, err := host.Launch(context.Background(), host.LaunchConfig{Name: "tcp", Path: bin})
		if err != nil {
			b.Fatal(err)
		}
		tr = p
	}
	res, err := tr.Init(context.Background(), plugins.InitRequest{Hostname: "127.0.0.1"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { tr.Close(context.Background()) })
	return &bnode{tr: tr, endpoint: res.Endpoint}
}

// alloc registers a shared-memory region (as the connector does).
func (n *bnode) alloc(b testing.TB, size int) plugins.RegionID {
	seg, err := shm.New("bench", size)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { seg.Close() })
	mem := seg.Bytes()
	n.next++
	if _, err := n.tr.RegisterRegion(context.Background(), plugins.Region{ID: n.next, Addr: uint64(uintptr(unsafe.Pointer(&mem[0]))), Mem: mem, File: seg.File()}); err != nil {
		b.Fatal(err)
	}
	return n.next
}

// benchRaw moves the same batches over 4 plain TCP connections: WRITE sends
// blocks client->server, READ server->client; each block comes from and
// lands in its own slot of a batch-sized buffer (as KV blocks do); each
// batch ends with a one-byte ack per connection so batches do not overlap,
// like Transfer.
func benchRaw(b *testing.B, op string, size int) {
	const conns = 4
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	per := benchBatch / conns
	var wg sync.WaitGroup
	server := func(nc net.Conn) {
		defer wg.Done()
		defer nc.Close()
		mem := make([]byte, per*size)
		var one [1]byte
		for {
			if op == "write" {
				for k := 0; k < per; k++ {
					if _, err := io.ReadFull(nc, mem[k*size:(k+1)*size]); err != nil {
						return
					}
				}
				if _, err := nc.Write(one[:]); err != nil {
					return
				}
			} else {
				if _, err := io.ReadFull(nc, one[:]); err != nil {
					return
				}
				for k := 0; k < per; k++ {
					if _, err := nc.Write(mem[k*size : (k+1)*size]); err != nil {
						return
					}
				}
			}
		}
	}
	clients := make([]net.Conn, conns)
	for i := range clients {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		s, err := ln.Accept()
		if err != nil {
			b.Fatal(err)
		}
		wg.Add(1)
		go server(s)
		clients[i] = c
	}
	bufs := make([][]byte, conns)
	for i := range bufs {
		bufs[i] = make([]byte, per*size)
	}
	b.SetBytes(int64(benchBatch * size))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var cw sync.WaitGroup
		for ci, c := range clients {
			cw.Add(1)
			go func(c net.Conn, buf []byte) {
				defer cw.Done()
				var one [1]byte
				if op == "write" {
					for k := 0; k < per; k++ {
						c.Write(buf[k*size : (k+1)*size])
					}
					io.ReadFull(c, one[:])
				} else {
					c.Write(one[:])
					for k := 0; k < per; k++ {
						io.ReadFull(c, buf[k*size:(k+1)*size])
					}
				}
			}(c, bufs[ci])
		}
		cw.Wait()
	}
	b.StopTimer()
	for _, c := range clients {
		c.Close()
	}
	wg.Wait()
}
