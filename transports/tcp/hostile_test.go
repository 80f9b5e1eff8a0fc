package tcp_test

import (
	"io"
	"net"
	"runtime"
	"sync"
	"testing"

	"github.com/kvconnect/kvconnect/plugins/transporttest"
	"github.com/kvconnect/kvconnect/transports/tcp/internal/wire"
)

// TestHostileAnnouncementsAllocateNothing: nothing a peer announces on
// the data port makes the node allocate. 1000 connections that open with
// kvconnect's magic and then a bad header cost no connection buffers;
// 300 that announce 256 MiB WRITEs and READs outside every region, or
// Mooncake WRITEs of 4 EiB, and send 1 MiB of payload each, cost a
// fraction of what they sent. Measured as the process's cumulative heap
// allocation (runtime.MemStats.TotalAlloc), which counts every buffer
// however short-lived.
func TestHostileAnnouncementsAllocateNothing(t *testing.T) {
	b := transporttest.NewNode(t, inproc(""), "b")
	dst := b.Alloc(t, 1<<20, 0)
	endpoint := string(b.Endpoint)
	// attack sends msg on n connections, count at a time, each then
	// reading until the node closes it (so the node is done with it).
	attack := func(n int, msg func(i int) []byte) uint64 {
		t.Helper()
		runtime.GC()
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		var wg sync.WaitGroup
		sem := make(chan struct{}, 50)
		for i := 0; i < n; i++ {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				nc, err := net.Dial("tcp", endpoint)
				if err != nil {
					t.Error(err)
					return
				}
				defer nc.Close()
				nc.Write(msg(i))
				nc.(*net.TCPConn).CloseWrite()
				io.Copy(io.Discard, nc)
			}()
		}
		wg.Wait()
		runtime.ReadMemStats(&m1)
		return m1.TotalAlloc - m0.TotalAlloc
	}

	badHeader := make([]byte, wire.HeaderSize)
	(&wire.Header{Op: wire.OpWrite, Region: uint64(dst.ID), Length: 4096}).Encode(badHeader)
	badHeader[4] = 99 // a version nobody speaks
	got := attack(1000, func(int) []byte { return badHeader })
	t.Logf("1000 connections with a bad header: %d KiB allocated", got>>10)
	if got > 16<<20 {
		t.Errorf("1000 connections with a bad header allocated %d MiB (a connection's buffers are 80 KiB: 78 MiB if each got them)", got>>20)
	}

	payload := make([]byte, 1<<20)
	frame := func(h wire.Header) []byte {
		b := make([]byte, wire.HeaderSize)
		h.Encode(b)
		return b
	}
	write := append(frame(wire.Header{Op: wire.OpWrite, Region: 1 << 40, Length: wire.MaxLength}), payload...)
	read := frame(wire.Header{Op: wire.OpRead, Region: 1 << 40, Length: wire.MaxLength})
	mooncake := append(mooncakeHeader(1<<62, 8, true), payload...)
	msgs := [][]byte{write, read, mooncake}
	sent := 0
	for i := 0; i < 300; i++ {
		sent += len(msgs[i%3])
	}
	got = attack(300, func(i int) []byte { return msgs[i%3] })
	t.Logf("300 connections announcing 256 MiB and 4 EiB requests and sending %d MiB: %d KiB allocated", sent>>20, got>>10)
	if got > uint64(sent)/4 {
		t.Errorf("300 connections announcing 256 MiB and 4 EiB requests, sending %d MiB, allocated %d MiB", sent>>20, got>>20)
	}
}
