package simpletcp

import (
	"errors"
	"testing"

	"github.com/kvconnect/kvconnect/plugins"
)

func TestHeaderRoundTrip(t *testing.T) {
	in := header{op: plugins.OpWrite, region: 7, offset: 1 << 40, length: 4096}
	var b [headerSize]byte
	in.encode(&b)
	out, err := decodeHeader(b[:])
	if err != nil || out != in {
		t.Fatalf("round trip: %+v, %v", out, err)
	}
	for name, h := range map[string]header{
		"bad op":      {op: 9, region: 1, length: 1},
		"zero length": {op: plugins.OpRead, region: 1},
		"too long":    {op: plugins.OpRead, region: 1, length: maxLength + 1},
	} {
		h.encode(&b)
		if _, err := decodeHeader(b[:]); !errors.Is(err, plugins.ErrProtocol) {
			t.Errorf("%s: %v, want ErrProtocol", name, err)
		}
	}
}

func FuzzDecodeHeader(f *testing.F) {
	var b [headerSize]byte
	header{op: plugins.OpRead, region: 1, offset: 2, length: 3}.encode(&b)
	f.Add(b[:])
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := decodeHeader(data)
		if err != nil {
			return
		}
		var again [headerSize]byte
		h.encode(&again)
		if string(again[:]) != string(data) {
			t.Fatalf("re-encoded header differs")
		}
	})
}
