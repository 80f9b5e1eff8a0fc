package wire

import (
	"bytes"
	"errors"
	"testing"
)

func TestHeaderRoundTrip(t *testing.T) {
	tests := []Header{
		{Op: OpWrite, ReqID: 1, Region: 7, Offset: 123, Length: 4096},
		{Op: OpRead, ReqID: ^uint64(0), Region: 0, Offset: 0x7f00_0000_1000, Length: MaxLength},
		{Op: OpWriteAck, Status: StatusOutOfBounds, ReqID: 42},
		{Op: OpReadResp, Status: StatusUnknownRegion, ReqID: 43},
	}
	for _, h := range tests {
		var b [HeaderSize]byte
		h.Encode(b[:])
		var got Header
		if err := got.Decode(b[:]); err != nil {
			t.Fatalf("Decode(%+v): %v", h, err)
		}
		if got != h {
			t.Fatalf("round trip: got %+v want %+v", got, h)
		}
	}
}

func TestHeaderDecodeRejects(t *testing.T) {
	valid := func() []byte {
		var b [HeaderSize]byte
		h := Header{Op: OpWrite, ReqID: 1, Region: 1, Length: 10}
		h.Encode(b[:])
		return b[:]
	}
	tests := []struct {
		name   string
		mutate func([]byte) []byte
		want   error
	}{
		{"short", func(b []byte) []byte { return b[:HeaderSize-1] }, ErrShort},
		{"magic", func(b []byte) []byte { b[0] ^= 0xff; return b }, ErrBadMagic},
		{"version", func(b []byte) []byte { b[4] = 9; return b }, ErrBadVersion},
		{"op", func(b []byte) []byte { b[5] = 0x33; return b }, ErrBadOp},
		{"length", func(b []byte) []byte { b[39] = 0x01; return b }, ErrTooLong},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h Header
			err := h.Decode(tt.mutate(valid()))
			if !errors.Is(err, tt.want) {
				t.Fatalf("Decode: got %v, want %v", err, tt.want)
			}
		})
	}
}

func FuzzHeaderDecode(f *testing.F) {
	var b [HeaderSize]byte
	(&Header{Op: OpWrite, ReqID: 1, Region: 1, Offset: 2, Length: 3}).Encode(b[:])
	f.Add(b[:])
	(&Header{Op: OpReadResp, Status: StatusOutOfBounds}).Encode(b[:])
	f.Add(b[:])
	f.Add([]byte("KVCN"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var h Header
		if err := h.Decode(data); err != nil {
			return
		}
		if h.Length > MaxLength {
			t.Fatalf("decoded length %d above MaxLength", h.Length)
		}
		var out [HeaderSize]byte
		h.Encode(out[:])
		if !bytes.Equal(out[:], data[:HeaderSize]) {
			t.Fatalf("re-encode differs:\n got %x\nwant %x", out, data[:HeaderSize])
		}
	})
}

func BenchmarkHeaderEncodeDecode(b *testing.B) {
	var buf [HeaderSize]byte
	h := Header{Op: OpWrite, ReqID: 1, Region: 1, Offset: 4096, Length: 65536}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		h.ReqID = uint64(i)
		h.Encode(buf[:])
		var d Header
		if err := d.Decode(buf[:]); err != nil {
			b.Fatal(err)
		}
	}
}
