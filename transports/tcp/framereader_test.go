package tcp

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"testing"

	"github.com/kvconnect/kvconnect/transports/tcp/internal/wire"
)

// frameStream encodes frames with payloads of the given sizes (each
// payload a pattern derived from its index) and returns the bytes on the
// wire and the payloads.
func frameStream(sizes []int) (wireBytes []byte, payloads [][]byte) {
	rng := rand.New(rand.NewPCG(7, 9))
	for i, n := range sizes {
		h := wire.Header{Op: wire.OpWrite, ReqID: uint64(i + 1), Length: uint64(n)}
		var hb [wire.HeaderSize]byte
		h.Encode(hb[:])
		p := make([]byte, n)
		for j := range p {
			p[j] = byte(rng.Uint32())
		}
		wireBytes = append(append(wireBytes, hb[:]...), p...)
		payloads = append(payloads, p)
	}
	return wireBytes, payloads
}

// pipePair is an in-memory connection pair: not a socket, so the
// frameReader falls back to plain reads.
func pipePair(t testing.TB) (a, b net.Conn) {
	a, b = net.Pipe()
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// connPairs: a frameReader reads a socket with readv where there is one,
// anything else with plain reads.
var connPairs = []struct {
	name string
	pair func(testing.TB) (net.Conn, net.Conn)
}{{"socket", tcpPair}, {"pipe", pipePair}}

// TestFrameReaderReadsEveryFrame: mixed sizes (empty, small, around the
// buffer's half and whole size, large), sent in pieces of random sizes,
// come out whole and in order, over a socket (readv) and over a pipe
// (plain reads); a payload's discard skips exactly it.
func TestFrameReaderReadsEveryFrame(t *testing.T) {
	sizes := []int{0, 1, 100, 4 << 10, readBufferSize/2 - 1, readBufferSize / 2, readBufferSize - 1, readBufferSize,
		readBufferSize + 1, 64 << 10, 3, 1 << 20, 0, 64<<10 + 5, 7, 7, 7, readBufferSize * 3, 100}
	stream, payloads := frameStream(sizes)
	for _, c := range connPairs {
		t.Run(c.name, func(t *testing.T) {
			cli, srv := c.pair(t)
			go func() {
				rng := rand.New(rand.NewPCG(1, 2))
				for rest := stream; len(rest) > 0; {
					n := min(len(rest), 1+rng.IntN(96<<10))
					if _, err := cli.Write(rest[:n]); err != nil {
						return
					}
					rest = rest[n:]
				}
			}()
			fr := newFrameReader(srv)
			if c.name == "socket" && fr.raw == nil && vectorReadsHere {
				t.Fatal("no vector reader on a TCP socket")
			}
			for i, want := range payloads {
				var hb [wire.HeaderSize]byte
				if _, err := fr.header(hb[:]); err != nil {
					t.Fatalf("frame %d: header: %v", i, err)
				}
				var h wire.Header
				if err := h.Decode(hb[:]); err != nil {
					t.Fatalf("frame %d: %v", i, err)
				}
				if h.ReqID != uint64(i+1) || h.Length != uint64(len(want)) {
					t.Fatalf("frame %d: header says request %d, %d bytes; want %d, %d", i, h.ReqID, h.Length, i+1, len(want))
				}
				if i%5 == 4 {
					if err := fr.discard(h.Length); err != nil {
						t.Fatalf("frame %d: discard: %v", i, err)
					}
					continue
				}
				got := make([]byte, h.Length)
				if n, err := fr.payload(got); err != nil || n != len(got) {
					t.Fatalf("frame %d: payload: %d of %d bytes, %v", i, n, len(got), err)
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("frame %d (%d bytes): payload differs", i, len(want))
				}
			}
			if fr.Buffered() != 0 {
				t.Fatalf("%d bytes buffered after the last frame", fr.Buffered())
			}
		})
	}
}

// TestFrameReaderKeepsLargePayloadsOutOfTheBuffer: after a large
// payload, the next header is read without the next payload's start (it
// would be copied twice); small frames still share the buffer's reads.
func TestFrameReaderKeepsLargePayloadsOutOfTheBuffer(t *testing.T) {
	for _, c := range connPairs {
		t.Run(c.name, func(t *testing.T) {
			cli, srv := c.pair(t)
			stream, _ := frameStream([]int{64 << 10, 64 << 10, 100, 100, 100})
			go cli.Write(stream)
			fr := newFrameReader(srv)
			var hb [wire.HeaderSize]byte
			p := make([]byte, 64<<10)
			for i := range 2 {
				if _, err := fr.header(hb[:]); err != nil {
					t.Fatal(err)
				}
				if i == 1 && fr.Buffered() != 0 {
					t.Fatalf("after a 64 KiB payload and the next header, %d bytes of the next payload sit in the buffer", fr.Buffered())
				}
				if _, err := fr.payload(p); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := fr.header(hb[:]); err != nil {
				t.Fatal(err)
			}
			small := make([]byte, 100)
			if _, err := fr.payload(small); err != nil {
				t.Fatal(err)
			}
			if _, err := fr.header(hb[:]); err != nil {
				t.Fatal(err)
			}
			if c.name == "socket" && fr.Buffered() == 0 {
				// The stream was written at once: the read that brought
				// the small frame's payload brought the frames behind it.
				t.Fatal("small frames are not read ahead")
			}
		})
	}
}

// TestFrameReaderTruncatedPayload: a peer that closes in the middle of
// a payload is io.ErrUnexpectedEOF, at a header boundary io.EOF.
func TestFrameReaderTruncatedPayload(t *testing.T) {
	for _, size := range []int{100, 64 << 10} {
		cli, srv := tcpPair(t)
		stream, _ := frameStream([]int{size})
		go func() {
			cli.Write(stream[:len(stream)-1])
			cli.Close()
		}()
		fr := newFrameReader(srv)
		var hb [wire.HeaderSize]byte
		if _, err := fr.header(hb[:]); err != nil {
			t.Fatal(err)
		}
		if _, err := fr.payload(make([]byte, size)); !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("%d-byte payload cut short: %v, want io.ErrUnexpectedEOF", size, err)
		}
	}
	cli, srv := tcpPair(t)
	cli.Close()
	var hb [wire.HeaderSize]byte
	if _, err := newFrameReader(srv).header(hb[:]); !errors.Is(err, io.EOF) {
		t.Fatalf("header from a closed peer: %v, want io.EOF", err)
	}
}

// chunkedConn hands out a byte stream in pieces of sizes it is given
// (at least one byte each), as a socket hands out what has arrived; it
// is not a socket, so the frameReader reads it with plain reads.
type chunkedConn struct {
	net.Conn // nil: only Read is used
	data     []byte
	pieces   []byte
}

func (c *chunkedConn) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := len(c.data)
	if len(c.pieces) > 0 {
		n = 1 + int(c.pieces[0])*int(c.pieces[0])*4 // 1 byte to 256 KiB
		c.pieces = c.pieces[1:]
	}
	n = min(n, len(p), len(c.data))
	copy(p, c.data[:n])
	c.data = c.data[n:]
	return n, nil
}

// FuzzFrameReader: frames of sizes the input picks, arriving in pieces
// the input picks, come out whole and in order whether their payloads
// are read or discarded, and the stream's end is io.EOF at a header.
func FuzzFrameReader(f *testing.F) {
	f.Add([]byte{0, 0, 0, 1, 0x40, 0, 0, 0x10, 0xff}, []byte{3, 200, 1, 0, 90})
	f.Add([]byte{0xff, 0xff, 0, 0, 0x3f, 0xff, 0x40, 0x01}, []byte{})
	f.Add([]byte{0x20, 0x00, 0x20, 0x00, 0x20, 0x00}, []byte{64, 64, 64, 64, 64, 64, 64})
	f.Fuzz(func(t *testing.T, spec, pieces []byte) {
		var sizes []int
		var skip []bool
		for i := 0; i+1 < len(spec) && len(sizes) < 24; i += 2 {
			n := int(spec[i]&0x7f)<<8 | int(spec[i+1]) // up to 32 KiB - 1, ...
			if spec[i]&0x80 != 0 {
				n *= 3 // ... or up to 96 KiB
			}
			sizes = append(sizes, n)
			skip = append(skip, spec[i+1]&1 == 1)
		}
		stream, payloads := frameStream(sizes)
		fr := newFrameReader(&chunkedConn{data: stream, pieces: pieces})
		for i, want := range payloads {
			var hb [wire.HeaderSize]byte
			if _, err := fr.header(hb[:]); err != nil {
				t.Fatalf("frame %d: header: %v", i, err)
			}
			var h wire.Header
			if err := h.Decode(hb[:]); err != nil || h.ReqID != uint64(i+1) || h.Length != uint64(len(want)) {
				t.Fatalf("frame %d: header %+v, %v; want request %d, %d bytes", i, h, err, i+1, len(want))
			}
			if skip[i] {
				if err := fr.discard(h.Length); err != nil {
					t.Fatalf("frame %d: discard: %v", i, err)
				}
				continue
			}
			got := make([]byte, len(want))
			if _, err := fr.payload(got); err != nil || !bytes.Equal(got, want) {
				t.Fatalf("frame %d (%d bytes): payload differs or %v", i, len(want), err)
			}
		}
		var hb [wire.HeaderSize]byte
		if n, err := fr.header(hb[:]); n != 0 || !errors.Is(err, io.EOF) {
			t.Fatalf("after the last frame: %d bytes, %v; want io.EOF", n, err)
		}
	})
}

// TestFrameReaderPayloadsWithAnEmptyPlace: payloads given an empty place
// among others (no caller does; the target once did, for a WRITE of no
// bytes in a group) fills the others in order and takes nothing for it.
func TestFrameReaderPayloadsWithAnEmptyPlace(t *testing.T) {
	for _, c := range connPairs {
		t.Run(c.name, func(t *testing.T) {
			cli, srv := c.pair(t)
			_, want := frameStream([]int{40 << 10, 64 << 10})
			data := append(append([]byte(nil), want[0]...), want[1]...)
			go cli.Write(data)
			fr := newFrameReader(srv)
			a, b := make([]byte, len(want[0])), make([]byte, len(want[1]))
			n, err := fr.payloads([][]byte{a, {}, b})
			if err != nil || n != len(data) {
				t.Fatalf("payloads: %d bytes, %v; want %d", n, err, len(data))
			}
			if !bytes.Equal(a, want[0]) || !bytes.Equal(b, want[1]) {
				t.Fatal("the payloads did not land in their places")
			}
		})
	}
}
