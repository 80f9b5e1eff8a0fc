package pluginrpc

import (
	"errors"
	"testing"

	"github.com/kvconnect/kvconnect/errdefs"
)

func TestOpCodecRoundTrip(t *testing.T) {
	ops := []Op{
		{Kind: 1, LocalRegion: 1, LocalOffset: 2, RemoteRegion: 3, RemoteOffset: 4, Length: 5},
		{Kind: 0, LocalRegion: ^uint64(0), LocalOffset: ^uint64(0), RemoteOffset: 0x7f0000001000, Length: 1 << 40},
	}
	var b []byte
	for _, o := range ops {
		b = AppendOp(b, o)
	}
	n, err := CountOps(b)
	if err != nil || n != len(ops) {
		t.Fatalf("CountOps = %d, %v", n, err)
	}
	for i := range ops {
		if got := DecodeOp(b, i); got != ops[i] {
			t.Fatalf("op %d: %+v != %+v", i, got, ops[i])
		}
	}
	if _, err := CountOps(make([]byte, OpRecordSize+1)); !errors.Is(err, errdefs.ErrProtocol) {
		t.Fatalf("ragged input: %v, want ErrProtocol", err)
	}
	if _, err := CountOps(make([]byte, OpRecordSize*(MaxOps+1))); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("too many ops: %v, want ErrInvalidArgument", err)
	}
}

func FuzzDecodeOps(f *testing.F) {
	f.Add(AppendOp(nil, Op{Kind: 1, LocalRegion: 1, RemoteRegion: 2, Length: 3}))
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		n, err := CountOps(b)
		if err != nil {
			return
		}
		var again []byte
		for i := 0; i < n; i++ {
			again = AppendOp(again, DecodeOp(b, i))
		}
		if string(again) != string(b) {
			t.Fatal("re-encoded ops differ")
		}
	})
}

func BenchmarkOpCodec(b *testing.B) {
	buf := make([]byte, 0, 128*OpRecordSize)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		buf = buf[:0]
		for j := 0; j < 128; j++ {
			buf = AppendOp(buf, Op{Kind: 1, LocalRegion: 1, LocalOffset: uint64(j) << 16, RemoteRegion: 2, RemoteOffset: uint64(j) << 16, Length: 65536})
		}
		n, _ := CountOps(buf)
		for j := 0; j < n; j++ {
			_ = DecodeOp(buf, j)
		}
	}
}
