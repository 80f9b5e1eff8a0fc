package ucxpath

import (
	"bytes"
	"errors"
	"reflect"
	"testing"

	"github.com/kvconnect/kvconnect/plugins"
)

func sampleMessages() []message {
	return []message{
		{typ: msgHello, client: 7, where: place{pid: 1234, boot: [16]byte{1, 2, 3}, pidNS: 99}, worker: []byte("worker-address")},
		{typ: msgWelcome, client: 7, more: true, regions: []liveRegion{{id: 1, token: 11}, {id: 2, token: 22}}},
		{typ: msgWelcome, client: 7, regions: []liveRegion{}},
		{typ: msgRevoke, client: 9, seq: 3, reason: revokeDeregistered, regions: []liveRegion{{id: 5, token: 55}}},
		{typ: msgRevoke, client: 9, seq: 4, reason: revokeClosing, regions: []liveRegion{}},
		{typ: msgAck, client: 9, seq: 4},
		{typ: msgBye, client: 9},
	}
}

func TestMessageRoundTrip(t *testing.T) {
	for _, m := range sampleMessages() {
		got, err := decodeMessage(m.encode())
		if err != nil {
			t.Fatalf("%s: %v", m.typ, err)
		}
		if !reflect.DeepEqual(got, m) {
			t.Fatalf("%s: got %+v want %+v", m.typ, got, m)
		}
	}
}

func TestMessageRejects(t *testing.T) {
	good := message{typ: msgRevoke, client: 1, seq: 2, regions: []liveRegion{{id: 1, token: 2}}}.encode()
	for name, b := range map[string][]byte{
		"empty":         nil,
		"short":         good[:11],
		"bad magic":     append([]byte{'x'}, good[1:]...),
		"bad version":   append([]byte{msgMagic, 9}, good[2:]...),
		"unknown type":  append([]byte{msgMagic, msgVersion, 99}, good[3:]...),
		"count too big": append(good[:len(good)-16:len(good)-16], make([]byte, 8)...),
		"truncated":     good[:len(good)-1],
		"ack long":      append(message{typ: msgAck}.encode(), 0),
		"bye with data": append(message{typ: msgBye}.encode(), 0),
		"short hello":   message{typ: msgHello}.encode(),
	} {
		if _, err := decodeMessage(b); !errors.Is(err, plugins.ErrProtocol) {
			t.Errorf("%s: got %v, want ErrProtocol", name, err)
		}
	}
}

func TestEndpointAndKeyRoundTrip(t *testing.T) {
	e := endpoint{sharedMemoryOnly: true, where: place{pid: 42, boot: [16]byte{9}, pidNS: 7}, worker: []byte{1, 2, 3}}
	got, err := decodeEndpoint(e.encode())
	if err != nil || !reflect.DeepEqual(got, e) {
		t.Fatalf("endpoint: %+v, %v", got, err)
	}
	for name, b := range map[string][]byte{"empty": nil, "tcp endpoint": []byte("127.0.0.1:4000"), "no worker": e.encode()[:endpointHeader]} {
		if _, err := decodeEndpoint(b); err == nil {
			t.Errorf("endpoint %s accepted", name)
		}
	}
	k := regionKey{token: 1, va: 0x1000, length: 4096, rkey: []byte{7, 7}}
	gk, err := decodeRegionKey(k.encode())
	if err != nil || !reflect.DeepEqual(gk, k) {
		t.Fatalf("key: %+v, %v", gk, err)
	}
	wrap := regionKey{token: 1, va: ^uint64(0) - 10, length: 4096, rkey: []byte{1}}.encode()
	for name, b := range map[string][]byte{"empty": nil, "no rkey": k.encode()[:32], "wraps": wrap,
		"zero length": regionKey{token: 1, va: 1, rkey: []byte{1}}.encode(), "version": append([]byte{9}, k.encode()[1:]...)} {
		if _, err := decodeRegionKey(b); !errors.Is(err, plugins.ErrProtocol) {
			t.Errorf("key %s: got %v, want ErrProtocol", name, err)
		}
	}
}

func TestRemoteTable(t *testing.T) {
	key := func(va, n uint64) []byte { return regionKey{token: 1, va: va, length: n, rkey: []byte{1}}.encode() }
	rt, err := newRemoteTable([]plugins.RemoteRegion{
		{ID: 1, Addr: 0x10000, Size: 100, Key: key(0x90000, 100)},
		{ID: 2, Addr: 0x20000, Size: 50, Key: key(0xa0000, 64)},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		id        plugins.RegionID
		off, n    uint64
		want      error
		wantID    plugins.RegionID
		wantInReg uint64
	}{
		{1, 0, 100, nil, 1, 0},
		{1, 99, 1, nil, 1, 99},
		{1, 99, 2, plugins.ErrOutOfBounds, 0, 0},
		{1, 1 << 63, 1 << 63, plugins.ErrOutOfBounds, 0, 0},
		{3, 0, 1, plugins.ErrUnknownRegion, 0, 0},
		{0, 0x10000 + 10, 90, nil, 1, 10},
		{0, 0x20000 + 49, 1, nil, 2, 49},
		{0, 0x20000 + 49, 2, plugins.ErrOutOfBounds, 0, 0}, // the key covers 64 but only 50 are published
		{0, 0x20000 + 50, 1, plugins.ErrUnknownRegion, 0, 0},
		{0, 0x0fff0, 32, plugins.ErrUnknownRegion, 0, 0},
	} {
		rr, off, err := rt.resolve(c.id, c.off, c.n)
		if c.want != nil {
			if !errors.Is(err, c.want) {
				t.Errorf("resolve(%d, 0x%x, %d): %v, want %v", c.id, c.off, c.n, err, c.want)
			}
			continue
		}
		if err != nil || rr.id != c.wantID || off != c.wantInReg {
			t.Errorf("resolve(%d, 0x%x, %d) = %v, %d, %v", c.id, c.off, c.n, rr, off, err)
		}
	}
	for name, rs := range map[string][]plugins.RemoteRegion{
		"key smaller than region": {{ID: 1, Addr: 0x1000, Size: 200, Key: key(0x1000, 100)}},
		"overlap":                 {{ID: 1, Addr: 0x1000, Size: 100, Key: key(1, 100)}, {ID: 2, Addr: 0x1050, Size: 100, Key: key(1, 100)}},
		"duplicate":               {{ID: 1, Addr: 0x1000, Size: 10, Key: key(1, 10)}, {ID: 1, Addr: 0x2000, Size: 10, Key: key(1, 10)}},
		"id 0":                    {{ID: 0, Addr: 0x1000, Size: 10, Key: key(1, 10)}},
		"no key":                  {{ID: 1, Addr: 0x1000, Size: 10}},
		"wraps":                   {{ID: 1, Addr: ^uint64(0) - 5, Size: 10, Key: key(1, 10)}},
	} {
		if _, err := newRemoteTable(rs); !errors.Is(err, plugins.ErrProtocol) {
			t.Errorf("%s: got %v, want ErrProtocol", name, err)
		}
	}
}

func FuzzDecodeMessage(f *testing.F) {
	for _, m := range sampleMessages() {
		f.Add(m.encode())
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeMessage(b)
		if err != nil {
			return
		}
		again, err := decodeMessage(m.encode())
		if err != nil || !reflect.DeepEqual(again, m) {
			t.Fatalf("re-encoding %+v: %+v, %v", m, again, err)
		}
	})
}

func FuzzDecodeEndpointAndKey(f *testing.F) {
	f.Add(endpoint{where: place{pid: 1}, worker: []byte{1}}.encode())
	f.Add(regionKey{token: 1, va: 1, length: 1, rkey: []byte{1}}.encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		if e, err := decodeEndpoint(b); err == nil && !bytes.Equal(e.encode()[6:], b[6:]) {
			t.Fatalf("endpoint %x re-encodes differently", b)
		}
		if k, err := decodeRegionKey(b); err == nil {
			if k.length == 0 || k.va+k.length < k.va || !bytes.Equal(k.encode()[8:], b[8:]) {
				t.Fatalf("key %x: %+v", b, k)
			}
		}
	})
}
