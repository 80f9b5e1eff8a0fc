package plugins

import (
	"errors"
	"testing"
)

func TestOpCodecRoundTrip(t *testing.T) {
	ops := []Op{
		{Kind: OpWrite, LocalRegion: 1, LocalOffset: 2, RemoteRegion: 3, RemoteOffset: 4, Length: 5},
		{Kind: OpRead, LocalRegion: ^RegionID(0), LocalOffset: ^uint64(0), RemoteOffset: 0x7f0000001000, Length: 1 << 40},
	}
	got, err := decodeOps(nil, appendOps(nil, ops))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(ops) || got[0] != ops[0] || got[1] != ops[1] {
		t.Fatalf("round trip: %+v != %+v", got, ops)
	}
	if _, err := decodeOps(nil, make([]byte, opRecordSize+1)); !errors.Is(err, ErrProtocol) {
		t.Fatalf("ragged input: %v, want ErrProtocol", err)
	}
}

func FuzzDecodeOps(f *testing.F) {
	f.Add(appendOps(nil, []Op{{Kind: OpWrite, LocalRegion: 1, RemoteRegion: 2, Length: 3}}))
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		ops, err := decodeOps(nil, b)
		if err != nil {
			return
		}
		again := appendOps(nil, ops)
		if string(again) != string(b) {
			t.Fatal("re-encoded ops differ")
		}
	})
}

func BenchmarkOpCodec(b *testing.B) {
	ops := make([]Op, 128)
	for i := range ops {
		ops[i] = Op{Kind: OpWrite, LocalRegion: 1, LocalOffset: uint64(i) << 16, RemoteRegion: 2, RemoteOffset: uint64(i) << 16, Length: 65536}
	}
	buf := make([]byte, 0, len(ops)*opRecordSize)
	var dst []Op
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		var err error
		buf = appendOps(buf[:0], ops)
		if dst, err = decodeOps(dst, buf); err != nil {
			b.Fatal(err)
		}
	}
}
