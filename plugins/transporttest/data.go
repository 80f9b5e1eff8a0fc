package transporttest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/kvconnect/kvconnect/plugins"
)

func testRoundTripSizes(t *testing.T, h Harness) {
	a, b := pair(t, h)
	max := h.MaxSize
	src := a.Alloc(t, max+64, 0)
	back := a.Alloc(t, max+64, 0)
	dst := b.Alloc(t, max+64, 0)
	peer := a.Connect(t, b)
	sizes := []int{1, 7, 4095, 4096, 4097, 65536 + 13, 1<<20 + 3, 4<<20 - 1, 16 << 20, max}
	for i, size := range sizes {
		if size > max {
			continue
		}
		srcOff, dstOff := uint64(i%7), uint64((i*13)%61) // unaligned
		Fill(src.Bytes[srcOff:srcOff+uint64(size)], uint64(size))
		a.MustTransfer(t, peer, []plugins.Op{{Kind: plugins.OpWrite, LocalRegion: src.ID, LocalOffset: srcOff, RemoteRegion: dst.ID, RemoteOffset: dstOff, Length: uint64(size)}})
		equal(t, fmt.Sprintf("WRITE %d bytes", size), dst.Bytes[dstOff:dstOff+uint64(size)], src.Bytes[srcOff:srcOff+uint64(size)])
		clear(back.Bytes[:size+16])
		a.MustTransfer(t, peer, []plugins.Op{{Kind: plugins.OpRead, LocalRegion: back.ID, LocalOffset: 5, RemoteRegion: dst.ID, RemoteOffset: dstOff, Length: uint64(size)}})
		equal(t, fmt.Sprintf("READ %d bytes", size), back.Bytes[5:5+size], src.Bytes[srcOff:srcOff+uint64(size)])
		if back.Bytes[4] != 0 || back.Bytes[5+size] != 0 {
			t.Fatalf("READ %d bytes wrote outside its local range", size)
		}
	}
}

func testLargeBatch(t *testing.T, h Harness) {
	a, b := pair(t, h)
	const nops = 500
	r := rand.New(rand.NewPCG(1, 2))
	sizes := make([]int, nops)
	total := 0
	for i := range sizes {
		sizes[i] = 1 + r.IntN(20000)
		total += sizes[i]
	}
	src := a.Alloc(t, total, 0)
	dst := b.Alloc(t, total, 0)
	back := a.Alloc(t, total, 0)
	Fill(src.Bytes, 77)
	peer := a.Connect(t, b)
	ops := make([]plugins.Op, nops)
	off := uint64(0)
	for i, s := range sizes {
		ops[i] = plugins.Op{Kind: plugins.OpWrite, LocalRegion: src.ID, LocalOffset: off, RemoteRegion: dst.ID, RemoteOffset: off, Length: uint64(s)}
		off += uint64(s)
	}
	a.MustTransfer(t, peer, ops)
	equal(t, "batch WRITE", dst.Bytes, src.Bytes)
	for i := range ops {
		ops[i].Kind = plugins.OpRead
		ops[i].LocalRegion = back.ID
	}
	a.MustTransfer(t, peer, ops)
	equal(t, "batch READ", back.Bytes, src.Bytes)
}

func testConcurrentBatches(t *testing.T, h Harness) {
	a, b := pair(t, h)
	const workers, nops, size = 8, 64, 16 << 10
	src := a.Alloc(t, workers*nops*size, 0)
	dst := b.Alloc(t, workers*nops*size, 0)
	Fill(src.Bytes, 5)
	peer := a.Connect(t, b)
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			ops := make([]plugins.Op, nops)
			for i := range ops {
				off := uint64((w*nops + i) * size)
				kind := plugins.OpWrite
				ops[i] = plugins.Op{Kind: kind, LocalRegion: src.ID, LocalOffset: off, RemoteRegion: dst.ID, RemoteOffset: off, Length: size}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			res := make([]plugins.OpResult, nops)
			if err := a.T.Transfer(ctx, peer, ops, res); err != nil {
				errs <- err
				return
			}
			for i, r := range res {
				if r.Err != nil {
					errs <- fmt.Errorf("worker %d op %d: %w", w, i, r.Err)
					return
				}
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	equal(t, "concurrent WRITEs", dst.Bytes, src.Bytes)
}

func testAbsoluteAddress(t *testing.T, h Harness) {
	a, b := pair(t, h)
	info, err := a.T.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.Capabilities&plugins.CapAbsoluteAddress == 0 {
		t.Skipf("%s does not report CapAbsoluteAddress", info.Name)
	}
	src := a.Alloc(t, 1<<20, 0)
	back := a.Alloc(t, 1<<20, 0)
	dst1 := b.Alloc(t, 1<<20, 0)
	dst2 := b.Alloc(t, 1<<20, 0)
	Fill(src.Bytes, 9)
	peer := a.Connect(t, b)
	a.MustTransfer(t, peer, []plugins.Op{
		{Kind: plugins.OpWrite, LocalRegion: 0, LocalOffset: src.Addr, RemoteOffset: dst1.Addr + 100, Length: 1000},
		{Kind: plugins.OpWrite, LocalRegion: src.ID, LocalOffset: 2000, RemoteOffset: dst2.Addr + 333, Length: 700000},
	})
	equal(t, "absolute WRITE 1", dst1.Bytes[100:1100], src.Bytes[:1000])
	equal(t, "absolute WRITE 2", dst2.Bytes[333:333+700000], src.Bytes[2000:702000])
	a.MustTransfer(t, peer, []plugins.Op{{Kind: plugins.OpRead, LocalRegion: 0, LocalOffset: back.Addr + 1, RemoteOffset: dst2.Addr + 333, Length: 700000}})
	equal(t, "absolute READ", back.Bytes[1:700001], src.Bytes[2000:702000])
}

func testOutOfBounds(t *testing.T, h Harness) {
	a, b := pair(t, h)
	const size, guard = 64 << 10, 8 << 10
	src := a.Alloc(t, size, 0)
	dst := b.Alloc(t, size, guard)
	Fill(src.Bytes, 3)
	whole := dst.Whole()
	Fill(whole, 4)
	before := bytes.Clone(whole)
	peer := a.Connect(t, b)
	info, _ := a.T.Info(context.Background())
	ops := []plugins.Op{
		{Kind: plugins.OpWrite, LocalRegion: src.ID, RemoteRegion: dst.ID, RemoteOffset: size - 100, Length: 200},
		{Kind: plugins.OpWrite, LocalRegion: src.ID, RemoteRegion: dst.ID, RemoteOffset: size, Length: 1},
		{Kind: plugins.OpWrite, LocalRegion: src.ID, RemoteRegion: dst.ID, RemoteOffset: 1 << 40, Length: 16},
		{Kind: plugins.OpRead, LocalRegion: src.ID, RemoteRegion: dst.ID, RemoteOffset: size - 1, Length: 2},
	}
	if info.Capabilities&plugins.CapAbsoluteAddress != 0 {
		ops = append(ops,
			plugins.Op{Kind: plugins.OpWrite, LocalRegion: src.ID, RemoteOffset: dst.Addr + size - 10, Length: 20},
			plugins.Op{Kind: plugins.OpWrite, LocalRegion: src.ID, RemoteOffset: dst.Addr - 10, Length: 20},
		)
	}
	res, _ := a.Transfer(t, peer, ops)
	for i, r := range res {
		if !errors.Is(r.Err, plugins.ErrOutOfBounds) && !errors.Is(r.Err, plugins.ErrUnknownRegion) {
			t.Errorf("op %d (%+v): got %v, want ErrOutOfBounds or ErrUnknownRegion", i, ops[i], r.Err)
		}
	}
	if !errors.Is(res[0].Err, plugins.ErrOutOfBounds) {
		t.Errorf("WRITE past the end: got %v, want ErrOutOfBounds", res[0].Err)
	}
	equal(t, "target memory and its neighbours after refused WRITEs", whole, before)
	// The local side is checked too: a READ into a too-small local range.
	res, _ = a.Transfer(t, peer, []plugins.Op{{Kind: plugins.OpRead, LocalRegion: src.ID, LocalOffset: size - 10, RemoteRegion: dst.ID, Length: 20}})
	if !errors.Is(res[0].Err, plugins.ErrOutOfBounds) {
		t.Errorf("READ past the end of the local region: got %v, want ErrOutOfBounds", res[0].Err)
	}
	// The connection still works after refusals.
	a.MustTransfer(t, peer, []plugins.Op{{Kind: plugins.OpWrite, LocalRegion: src.ID, RemoteRegion: dst.ID, Length: size}})
	equal(t, "WRITE after refusals", dst.Bytes, src.Bytes)
}

func testUnknown(t *testing.T, h Harness) {
	a, b := pair(t, h)
	src := a.Alloc(t, 4096, 0)
	dst := b.Alloc(t, 4096, 0)
	peer := a.Connect(t, b)
	res, _ := a.Transfer(t, peer, []plugins.Op{
		{Kind: plugins.OpWrite, LocalRegion: src.ID, RemoteRegion: dst.ID + 1000, Length: 10},
		{Kind: plugins.OpRead, LocalRegion: src.ID, RemoteRegion: dst.ID + 1000, Length: 10},
		{Kind: plugins.OpWrite, LocalRegion: src.ID + 1000, RemoteRegion: dst.ID, Length: 10},
	})
	for i, r := range res {
		if !errors.Is(r.Err, plugins.ErrUnknownRegion) {
			t.Errorf("op %d: got %v, want ErrUnknownRegion", i, r.Err)
		}
	}
	res = make([]plugins.OpResult, 1)
	err := a.T.Transfer(context.Background(), peer+1000, []plugins.Op{{Kind: plugins.OpWrite, LocalRegion: src.ID, RemoteRegion: dst.ID, Length: 10}}, res)
	if !errors.Is(err, plugins.ErrUnknownPeer) || !errors.Is(res[0].Err, plugins.ErrUnknownPeer) {
		t.Errorf("unknown peer: got %v / %v, want ErrUnknownPeer", err, res[0].Err)
	}
	res, _ = a.Transfer(t, peer, []plugins.Op{{Kind: 7, LocalRegion: src.ID, RemoteRegion: dst.ID, Length: 10}, {Kind: plugins.OpWrite, LocalRegion: src.ID, RemoteRegion: dst.ID, Length: 0}})
	for i, r := range res {
		if !errors.Is(r.Err, plugins.ErrInvalidArgument) {
			t.Errorf("invalid op %d: got %v, want ErrInvalidArgument", i, r.Err)
		}
	}
}

func testDeregistered(t *testing.T, h Harness) {
	a, b := pair(t, h)
	src := a.Alloc(t, 4096, 0)
	dst := b.Alloc(t, 4096, 0)
	peer := a.Connect(t, b)
	a.MustTransfer(t, peer, []plugins.Op{{Kind: plugins.OpWrite, LocalRegion: src.ID, RemoteRegion: dst.ID, Length: 4096}})
	id := dst.ID
	b.Free(t, dst)
	res, _ := a.Transfer(t, peer, []plugins.Op{{Kind: plugins.OpWrite, LocalRegion: src.ID, RemoteRegion: id, Length: 4096}})
	if !errors.Is(res[0].Err, plugins.ErrUnknownRegion) {
		t.Errorf("WRITE to a deregistered region: got %v, want ErrUnknownRegion", res[0].Err)
	}
}
