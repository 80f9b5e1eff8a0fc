package wire

import (
	"errors"
	"testing"
)

// table encodes hs back to back, as a group's header table.
func table(hs ...Header) []byte {
	b := make([]byte, len(hs)*HeaderSize)
	for i := range hs {
		hs[i].Encode(b[i*HeaderSize:])
	}
	return b
}

func TestGroupHeaderRoundTrip(t *testing.T) {
	for _, n := range []int{1, 2, 37, MaxGroup} {
		g := GroupHeader(n)
		var b [HeaderSize]byte
		g.Encode(b[:])
		var got Header
		if err := got.Decode(b[:]); err != nil {
			t.Fatalf("group of %d: Decode: %v", n, err)
		}
		if got.Op != OpGroup || got.Frames() != n {
			t.Fatalf("group of %d: decoded %+v (%d frames)", n, got, got.Frames())
		}
	}
}

func TestGroupHeaderDecodeRejects(t *testing.T) {
	for _, length := range []uint64{0, HeaderSize - 1, HeaderSize + 1, (MaxGroup + 1) * HeaderSize} {
		var b [HeaderSize]byte
		(&Header{Op: OpGroup, Length: length}).Encode(b[:])
		var h Header
		if err := h.Decode(b[:]); !errors.Is(err, ErrBadGroup) {
			t.Fatalf("group length %d: got %v, want ErrBadGroup", length, err)
		}
	}
}

func TestDecodeGroup(t *testing.T) {
	w := Header{Op: OpWrite, ReqID: 1, Region: 2, Offset: 3, Length: 4}
	r := Header{Op: OpRead, ReqID: 2, Region: 2, Offset: 9, Length: 5}
	ack := Header{Op: OpWriteAck, ReqID: 1, Region: FeatureGroups}
	resp := Header{Op: OpReadResp, ReqID: 2, Length: 5}
	bad := table(w)
	bad[0] ^= 0xff
	tests := []struct {
		name      string
		b         []byte
		responses bool
		want      []Header
		err       error
	}{
		{"requests", table(w, r, w), false, []Header{w, r, w}, nil},
		{"responses", table(ack, resp), true, []Header{ack, resp}, nil},
		{"a response among requests", table(w, ack), false, nil, ErrBadGroup},
		{"a request among responses", table(resp, r), true, nil, ErrBadGroup},
		{"a group inside", table(w, GroupHeader(1)), false, nil, ErrBadGroup},
		{"a bad header", append(table(w), bad...), false, nil, ErrBadMagic},
		{"empty", nil, false, nil, ErrBadGroup},
		{"a partial header", table(w)[:HeaderSize-1], false, nil, ErrBadGroup},
		{"too many", make([]byte, (MaxGroup+1)*HeaderSize), false, nil, ErrBadGroup},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecodeGroup(tt.b, make([]Header, 1), tt.responses)
			if !errors.Is(err, tt.err) {
				t.Fatalf("DecodeGroup: got %v, want %v", err, tt.err)
			}
			if err != nil {
				return
			}
			if len(got) != len(tt.want) {
				t.Fatalf("DecodeGroup: %d headers, want %d", len(got), len(tt.want))
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Fatalf("header %d: got %+v, want %+v", i, got[i], tt.want[i])
				}
			}
		})
	}
}

func TestCarries(t *testing.T) {
	tests := []struct {
		h    Header
		want uint64
	}{
		{Header{Op: OpWrite, Length: 7}, 7},
		{Header{Op: OpRead, Length: 7}, 0},
		{Header{Op: OpWriteAck}, 0},
		{Header{Op: OpReadResp, Length: 9}, 9},
		{GroupHeader(3), 0},
	}
	for _, tt := range tests {
		if got := tt.h.Carries(); got != tt.want {
			t.Fatalf("%s of length %d: Carries %d, want %d", tt.h.Op, tt.h.Length, got, tt.want)
		}
	}
}

func FuzzDecodeGroup(f *testing.F) {
	f.Add(table(Header{Op: OpWrite, ReqID: 1, Length: 3}, Header{Op: OpRead, ReqID: 2, Length: 4}), false)
	f.Add(table(Header{Op: OpWriteAck, ReqID: 1}, Header{Op: OpReadResp, ReqID: 2, Length: 4}), true)
	f.Add([]byte("KVCN"), false)
	f.Fuzz(func(t *testing.T, data []byte, responses bool) {
		hs, err := DecodeGroup(data, nil, responses)
		if err != nil {
			return
		}
		if len(hs)*HeaderSize != len(data) || len(hs) > MaxGroup {
			t.Fatalf("%d headers from %d bytes", len(hs), len(data))
		}
		for i, h := range hs {
			if h.Op == OpGroup || h.Op.IsResponse() != responses || h.Length > MaxLength {
				t.Fatalf("header %d accepted: %+v", i, h)
			}
		}
	})
}
