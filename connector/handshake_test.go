package connector

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"testing"

	"github.com/kvconnect/kvconnect/config"
)

// readFrame reads one frame against a fresh default budget and checks
// the budget holds nothing once the frame is released.
func readFrame(t testing.TB, r io.Reader, max int, request bool) (byte, []byte, error) {
	b := newFrameBudget(config.DefaultMaxHandshakeMemory)
	f, err := b.readFrame(context.Background(), r, max, request)
	if err != nil {
		if st := b.status(); st.InUse != 0 {
			t.Fatalf("a failed read left %d bytes held", st.InUse)
		}
		return 0, nil, err
	}
	if st := b.status(); st.InUse < int64(len(f.body)) {
		t.Fatalf("a %d-byte body held as %d bytes", len(f.body), st.InUse)
	}
	typ, body := f.typ, bytes.Clone(f.body)
	f.release()
	if st := b.status(); st.InUse != 0 {
		t.Fatalf("a released frame left %d bytes held", st.InUse)
	}
	return typ, body, nil
}

func TestFrameRoundTrip(t *testing.T) {
	big := bytes.Repeat([]byte("0123456789abcdef"), (3*frameChunk+100)/16) // several chunks and a partial one
	for _, body := range [][]byte{[]byte(`{"a":1}`), big} {
		for _, request := range []bool{true, false} {
			var buf bytes.Buffer
			if err := writeFrame(&buf, frameMetadata, body); err != nil {
				t.Fatal(err)
			}
			typ, got, err := readFrame(t, &buf, 1<<20, request)
			if err != nil || typ != frameMetadata || !bytes.Equal(got, body) {
				t.Fatalf("got %d, %d bytes (equal %v), %v", typ, len(got), bytes.Equal(got, body), err)
			}
		}
	}
}

func TestFrameRejects(t *testing.T) {
	tests := []struct {
		name string
		hdr  []byte
	}{
		{"zero length", frameHeader(0)},
		{"too long", frameHeader(1 << 30)},
		{"short", []byte{1, 0, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := decodeFrameHeader(tt.hdr, 1<<20)
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("got %v, want ErrProtocol", err)
			}
		})
	}
}

func frameHeader(n uint64) []byte {
	b := make([]byte, 9)
	binary.LittleEndian.PutUint64(b, n)
	return b
}

func TestDecodeDescriptorRejects(t *testing.T) {
	for name, body := range map[string]string{
		"not json":     `{`,
		"no name":      `{"kvconnect":{"transports":[]}}`,
		"zero id":      `{"name":"h:1","kvconnect":{},"buffers":[{"name":"h:1","id":0,"addr":1,"length":1}]}`,
		"empty buffer": `{"name":"h:1","kvconnect":{},"buffers":[{"name":"h:1","id":1,"addr":1,"length":0}]}`,
		"wraps":        `{"name":"h:1","kvconnect":{},"buffers":[{"name":"h:1","id":1,"addr":18446744073709551615,"length":2}]}`,
		"duplicate id": `{"name":"h:1","kvconnect":{},"buffers":[{"name":"h:1","id":1,"addr":100,"length":2},{"name":"h:1","id":1,"addr":200,"length":2}]}`,
		"overlap":      `{"name":"h:1","kvconnect":{},"buffers":[{"name":"h:1","id":1,"addr":100,"length":20},{"name":"h:1","id":2,"addr":110,"length":2}]}`,
		// Mooncake's own rules for its descriptors
		"mooncake buffer without a name":  `{"name":"h:1","protocol":"tcp","buffers":[{"addr":4096,"length":1}]}`,
		"mooncake buffer at address 0":    `{"name":"h:1","protocol":"tcp","buffers":[{"name":"h:1","addr":0,"length":1}]}`,
		"mooncake buffer of length 0":     `{"name":"h:1","protocol":"tcp","buffers":[{"name":"h:1","addr":4096,"length":0}]}`,
		"mooncake overlapping buffers":    `{"name":"h:1","protocol":"tcp","buffers":[{"name":"h:1","addr":4096,"length":100},{"name":"h:1","addr":4100,"length":1}]}`,
		"mooncake address as a string":    `{"name":"h:1","protocol":"tcp","buffers":[{"name":"h:1","addr":"4096","length":1}]}`,
		"mooncake data port as a string":  `{"name":"h:1","protocol":"tcp","tcp_data_port":"15001","buffers":[]}`,
		"mooncake buffer wraps the space": `{"name":"h:1","protocol":"tcp","buffers":[{"name":"h:1","addr":18446744073709551615,"length":2}]}`,
	} {
		if _, _, err := decodeDescriptor([]byte(body)); !errors.Is(err, ErrProtocol) {
			t.Errorf("%s: got %v, want ErrProtocol", name, err)
		}
	}
}

func FuzzReadFrame(f *testing.F) {
	var buf bytes.Buffer
	writeFrame(&buf, frameNotify, []byte(`{"name":"x"}`))
	f.Add(buf.Bytes())
	f.Add(frameHeader(0))
	f.Add(append(frameHeader(3), 1, '{', '}'))
	f.Fuzz(func(t *testing.T, data []byte) {
		typ, body, err := readFrame(t, bytes.NewReader(data), 4096, len(data)%2 == 0)
		if err != nil {
			return
		}
		if len(body)+1 > 4096 {
			t.Fatalf("accepted a %d-byte frame over the 4096 limit", len(body)+1)
		}
		var out bytes.Buffer
		writeFrame(&out, typ, body)
		if !bytes.Equal(out.Bytes(), data[:9+len(body)]) {
			t.Fatal("re-encoded frame differs")
		}
	})
}

func FuzzDecodeDescriptor(f *testing.F) {
	good, _ := json.Marshal(SegmentDescriptor{Name: "127.0.0.1:1", Protocol: "tcp", TCPDataPort: 2, TCPProtoVersion: 2,
		KVConnect: &NodeDescriptor{Version: descriptorVersion, Transports: []TransportEndpoint{{Name: "tcp", Endpoint: []byte("127.0.0.1:2")}}},
		Buffers:   []BufferDescriptor{{Name: "127.0.0.1:1", ID: 1, Addr: 4096, Length: 4096}}})
	f.Add(good)
	// captured from an unmodified Mooncake transfer_engine_bench target
	f.Add([]byte(`{"buffers":[{"addr":140383705104384,"length":1073741824,"name":"127.0.0.1:15838"}],"name":"127.0.0.1:15838","protocol":"tcp","tcp_data_port":15113,"tcp_proto_version":2,"timestamp":"2026-12-01 08:48:09.242926"}` + "\n"))
	f.Add([]byte(`{"name":"a","buffers":[{"id":1,"addr":1,"length":1}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		d, _, err := decodeDescriptor(data)
		if err != nil {
			return
		}
		if d.Name == "" {
			t.Fatal("accepted a descriptor without a name")
		}
		for _, b := range d.Buffers {
			if b.ID == 0 || b.Length == 0 || b.Addr+b.Length < b.Addr {
				t.Fatalf("accepted a bad buffer %+v", b)
			}
		}
	})
}
