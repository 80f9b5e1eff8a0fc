package mcwire

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/kvconnect/kvconnect/errdefs"
)

func TestHeaderMatchesMooncakesStruct(t *testing.T) {
	// A header as Mooncake writes it: garbage in the 7 padding bytes.
	raw := make([]byte, HeaderSize)
	binary.LittleEndian.PutUint64(raw[0:], 65536)
	binary.LittleEndian.PutUint64(raw[8:], 0x7fabc0001000)
	raw[16] = OpWrite | FlagV2
	copy(raw[17:], "\x20\x20\x31\x30\x30\x0a\x0a")
	h, err := Decode(raw)
	if err != nil || h != (Header{Size: 65536, Addr: 0x7fabc0001000, Write: true, V2: true}) {
		t.Fatalf("Decode = %+v, %v", h, err)
	}
	var b [HeaderSize]byte
	h.Encode(&b)
	if string(b[:17]) != string(raw[:17]) || string(b[17:]) != "\x00\x00\x00\x00\x00\x00\x00" {
		t.Fatalf("Encode = % x", b)
	}
	raw[16] = 5 // any opcode but WRITE is READ to Mooncake
	if h, _ := Decode(raw); h.Write || h.V2 {
		t.Fatalf("opcode 5: %+v", h)
	}
	binary.LittleEndian.PutUint64(raw[0:], 0)
	if _, err := Decode(raw); !errors.Is(err, errdefs.ErrProtocol) {
		t.Fatalf("size 0: %v", err)
	}
	if _, err := Decode(raw[:17]); !errors.Is(err, errdefs.ErrProtocol) {
		t.Fatalf("short header: %v", err)
	}
}

func TestStatus(t *testing.T) {
	var b [StatusSize]byte
	EncodeStatus(&b, StatusOK)
	if string(b[:]) != "\x00\x00\x00\x00VTCM" || DecodeStatus(b[:]) != nil {
		t.Fatalf("OK status: % x", b)
	}
	EncodeStatus(&b, StatusRejected)
	if err := DecodeStatus(b[:]); !errors.Is(err, errdefs.ErrOutOfBounds) {
		t.Fatalf("rejected: %v", err)
	}
	binary.LittleEndian.PutUint64(b[:], 1<<20) // payload bytes of a v1 peer
	if err := DecodeStatus(b[:]); !errors.Is(err, errdefs.ErrProtocol) {
		t.Fatalf("not a status: %v", err)
	}
	if !IsKVConnect([]byte("KVCN")) || IsKVConnect([]byte{0, 0, 1, 0}) {
		t.Fatal("IsKVConnect")
	}
}

func FuzzDecode(f *testing.F) {
	var b [HeaderSize]byte
	Header{Size: 1, Addr: 2, Write: true, V2: true}.Encode(&b)
	f.Add(b[:])
	f.Add([]byte("KVCN\x01\x01\x00\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := Decode(data)
		if err != nil {
			return
		}
		var again [HeaderSize]byte
		h.Encode(&again)
		if h2, err := Decode(again[:]); err != nil || h2 != h {
			t.Fatalf("round trip: %+v -> %+v, %v", h, h2, err)
		}
	})
}

func FuzzDecodeStatus(f *testing.F) {
	var b [StatusSize]byte
	EncodeStatus(&b, StatusOK)
	f.Add(b[:])
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := DecodeStatus(data); err == nil && (len(data) != StatusSize || binary.LittleEndian.Uint64(data) != StatusOK) {
			t.Fatalf("accepted % x", data)
		}
	})
}
