package efa

import (
	"bytes"
	"errors"
	"testing"

	"github.com/kvconnect/kvconnect/plugins"
)

func TestKeyRoundTrip(t *testing.T) {
	for _, k := range []regionKey{
		{Key: 42, Size: 1, Slot: 0, Token: 7},
		{Flags: keyFlagVirtAddr, Key: 1 << 40, Base: 0x7f0000001000, Size: 64 << 20, Slot: 65535, Token: ^uint64(0)},
		{Flags: keyFlagVirtAddr | keyFlagRaw, Base: 0x1000, Size: 4096, Raw: bytes.Repeat([]byte{0xab}, 40), Slot: 3, Token: 9},
	} {
		got, err := parseKey(k.marshal())
		if err != nil {
			t.Fatalf("%+v: %v", k, err)
		}
		if got.Flags != k.Flags || got.Key != k.Key || got.Base != k.Base || got.Size != k.Size || got.Slot != k.Slot || got.Token != k.Token || !bytes.Equal(got.Raw, k.Raw) {
			t.Fatalf("round trip: got %+v, want %+v", got, k)
		}
	}
}

func TestKeyRejects(t *testing.T) {
	good := regionKey{Flags: keyFlagVirtAddr, Key: 1, Base: 0x1000, Size: 4096, Token: 1}.marshal()
	mutate := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	for name, b := range map[string][]byte{
		"empty":            nil,
		"short":            good[:keyHeader-1],
		"version":          mutate(func(b []byte) []byte { b[0] = 2; return b }),
		"unknown flag":     mutate(func(b []byte) []byte { b[1] |= 0x80; return b }),
		"trailing bytes":   append(bytes.Clone(good), 0),
		"raw without flag": mutate(func(b []byte) []byte { b[2] = 1; return append(b, 0) }),
		"flag without raw": mutate(func(b []byte) []byte { b[1] |= keyFlagRaw; return b }),
		"zero size":        regionKey{Key: 1, Size: 0}.marshal(),
		"wraps":            regionKey{Key: 1, Base: ^uint64(0) - 10, Size: 100}.marshal(),
	} {
		if _, err := parseKey(b); !errors.Is(err, plugins.ErrProtocol) {
			t.Errorf("%s: got %v, want ErrProtocol", name, err)
		}
	}
}

func TestEndpointRoundTrip(t *testing.T) {
	e := endpoint{Provider: "tcp;ofi_rxm", AddrFormat: 2, Addr: []byte{2, 0, 1, 2, 127, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0},
		Status: regionKey{Flags: keyFlagVirtAddr, Key: 5, Base: 0x1000, Size: 8 * 1024}}
	got, err := parseEndpoint(e.marshal())
	if err != nil {
		t.Fatal(err)
	}
	if got.Provider != e.Provider || got.AddrFormat != e.AddrFormat || !bytes.Equal(got.Addr, e.Addr) || got.Status.Key != 5 || got.Status.Size != 8*1024 {
		t.Fatalf("round trip: got %+v, want %+v", got, e)
	}
	b := e.marshal()
	for name, bad := range map[string][]byte{
		"empty":     nil,
		"magic":     append([]byte("kvefb"), b[5:]...),
		"truncated": b[:len(b)-1],
		"trailing":  append(bytes.Clone(b), 0),
	} {
		if _, err := parseEndpoint(bad); !errors.Is(err, plugins.ErrInvalidArgument) {
			t.Errorf("%s: got %v, want ErrInvalidArgument", name, err)
		}
	}
	odd := e
	odd.Status.Size = 12 // not whole 8-byte slots
	if _, err := parseEndpoint(odd.marshal()); !errors.Is(err, plugins.ErrInvalidArgument) {
		t.Errorf("status table of 12 bytes: got %v, want ErrInvalidArgument", err)
	}
}

// Decoders of what peers publish never panic and never accept what they
// could not have produced.
func FuzzParseKey(f *testing.F) {
	f.Add(regionKey{Flags: keyFlagVirtAddr, Key: 1, Base: 0x1000, Size: 4096, Slot: 1, Token: 2}.marshal())
	f.Add(regionKey{Flags: keyFlagRaw, Size: 1, Raw: []byte{1, 2, 3}}.marshal())
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		k, err := parseKey(b)
		if err != nil {
			return
		}
		if !bytes.Equal(k.marshal(), b) {
			t.Fatalf("accepted %x but it re-encodes as %x", b, k.marshal())
		}
		if k.Size == 0 || k.Base+k.Size < k.Base {
			t.Fatalf("accepted a bad range: %+v", k)
		}
	})
}

func FuzzParseEndpoint(f *testing.F) {
	f.Add(endpoint{Provider: "shm", AddrFormat: 9, Addr: []byte("fi_shm://1:0:0"), Status: regionKey{Key: 1, Size: 8}}.marshal())
	f.Add([]byte("kvefa"))
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := parseEndpoint(b)
		if err != nil {
			return
		}
		if len(e.Addr) == 0 || len(e.Addr) > maxAddr || e.Provider == "" || e.Status.Size%8 != 0 {
			t.Fatalf("accepted %+v", e)
		}
		if !bytes.Equal(e.marshal(), b) {
			t.Fatalf("accepted %x but it re-encodes as %x", b, e.marshal())
		}
	})
}

func TestPeerResolve(t *testing.T) {
	p, _, err := newPeer(plugins.PeerInfo{Name: "p", Endpoint: endpoint{Provider: "x", AddrFormat: 1, Addr: []byte{1}, Status: regionKey{Size: 8}}.marshal(),
		Regions: []plugins.RemoteRegion{
			{ID: 1, Addr: 0x10000, Size: 0x1000, Key: regionKey{Flags: keyFlagVirtAddr, Key: 11, Base: 0x7000000, Size: 0x1000, Token: 1}.marshal()},
			{ID: 2, Addr: 0x20000, Size: 0x1000, Key: regionKey{Key: 22, Base: 0, Size: 0x1000, Token: 1}.marshal()},
		}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		id, off, n uint64
		raddr      uint64
		rkey       uint64
		err        error
	}{
		{id: 1, off: 0, n: 0x1000, raddr: 0x7000000, rkey: 11},
		{id: 1, off: 0x10, n: 0x10, raddr: 0x7000010, rkey: 11},
		{id: 2, off: 0x100, n: 1, raddr: 0x100, rkey: 22},
		{id: 0, off: 0x10008, n: 8, raddr: 0x7000008, rkey: 11}, // absolute: the peer host's address
		{id: 0, off: 0x20fff, n: 1, raddr: 0xfff, rkey: 22},
		{id: 1, off: 0xfff, n: 2, err: plugins.ErrOutOfBounds},
		{id: 1, off: 1 << 63, n: 1 << 63, err: plugins.ErrOutOfBounds},
		{id: 0, off: 0x20fff, n: 2, err: plugins.ErrOutOfBounds},
		{id: 0, off: 0x11000, n: 1, err: plugins.ErrUnknownRegion},
		{id: 0, off: 0xffff, n: 1, err: plugins.ErrUnknownRegion},
		{id: 3, off: 0, n: 1, err: plugins.ErrUnknownRegion},
	} {
		rr, raddr, err := p.resolve(tc.id, tc.off, tc.n)
		if tc.err != nil {
			if !errors.Is(err, tc.err) {
				t.Errorf("%+v: got %v, want %v", tc, err, tc.err)
			}
			continue
		}
		if err != nil || raddr != tc.raddr || rr.rkey != tc.rkey {
			t.Errorf("%+v: got 0x%x key %v err %v", tc, raddr, rr, err)
		}
	}
	// Overlapping or duplicate regions from a peer are refused.
	_, _, err = newPeer(plugins.PeerInfo{Name: "p", Endpoint: endpoint{Provider: "x", AddrFormat: 1, Addr: []byte{1}, Status: regionKey{Size: 8}}.marshal(),
		Regions: []plugins.RemoteRegion{
			{ID: 1, Addr: 0x10000, Size: 0x1000, Key: regionKey{Size: 0x1000, Token: 1}.marshal()},
			{ID: 2, Addr: 0x10800, Size: 0x1000, Key: regionKey{Size: 0x1000, Token: 1}.marshal()},
		}})
	if !errors.Is(err, plugins.ErrProtocol) {
		t.Errorf("overlapping regions: got %v, want ErrProtocol", err)
	}
}
