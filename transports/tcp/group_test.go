package tcp

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/kvconnect/kvconnect/transports/tcp/internal/wire"
)

// TestGroupsRoundTrip: what a frameWriter sends to a peer that reads
// groups comes out of a frameReader whole and in order, over a socket
// (readv, many payloads per call) and over a pipe (plain reads). A burst
// with several payloads goes out as a group, one frame or frames without
// payloads as plain frames; a burst longer than a group, or larger than
// the writer holds, is split.
func TestGroupsRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	sizes := []int{1, 100, 4 << 10, readBufferSize/2 - 1, readBufferSize, readBufferSize + 1, 64 << 10, 1 << 20, 5000}
	type frame struct {
		h       wire.Header
		payload []byte
	}
	bursts := [][]frame{}
	reqID := uint64(0)
	mk := func(op wire.Op, n int) frame {
		reqID++
		f := frame{h: wire.Header{Op: op, ReqID: reqID, Region: 1, Offset: uint64(rng.IntN(1 << 20)), Length: uint64(n)}}
		if op == wire.OpWrite {
			f.payload = make([]byte, n)
			for i := range f.payload {
				f.payload[i] = byte(rng.Uint32())
			}
		}
		return f
	}
	burst := func(n int, reads bool) []frame {
		var b []frame
		for range n {
			op := wire.OpWrite
			if reads && rng.IntN(3) == 0 {
				op = wire.OpRead
			}
			b = append(b, mk(op, sizes[rng.IntN(len(sizes))]))
		}
		return b
	}
	bursts = append(bursts,
		burst(1, false), // one frame: plain
		burst(2, false), // a group
		burst(40, true), // a group with READs among the WRITEs
		[]frame{mk(wire.OpRead, 5), mk(wire.OpRead, 7)}, // no payloads: plain frames
		burst(wire.MaxGroup+10, false),                  // two groups
		burst(12, false),
	)
	// Expected on the wire: each burst's frames, with how many groups.
	for _, c := range connPairs {
		t.Run(c.name, func(t *testing.T) {
			cli, srv := c.pair(t)
			errc := make(chan error, 1)
			go func() {
				fw := newFrameWriter(cli)
				fw.grouped = true
				for _, b := range bursts {
					for i := range b {
						if err := fw.frame(&b[i].h, b[i].payload, nil); err != nil {
							errc <- err
							return
						}
					}
					if err := fw.flush(); err != nil {
						errc <- err
						return
					}
				}
				errc <- nil
			}()
			fr := newFrameReader(srv)
			var want []frame
			for _, b := range bursts {
				want = append(want, b...)
			}
			groups, plain := 0, 0
			var hs []wire.Header
			for next := 0; next < len(want); {
				var hb [wire.HeaderSize]byte
				if _, err := fr.header(hb[:]); err != nil {
					t.Fatalf("frame %d: header: %v", next, err)
				}
				var h wire.Header
				if err := h.Decode(hb[:]); err != nil {
					t.Fatalf("frame %d: %v", next, err)
				}
				got := []wire.Header{h}
				if h.Op == wire.OpGroup {
					var err error
					if hs, err = fr.group(&h, hs, false); err != nil {
						t.Fatalf("frame %d: group: %v", next, err)
					}
					got = hs
					groups++
				} else {
					plain++
				}
				var dsts [][]byte
				for i, g := range got {
					w := want[next+i]
					if g != w.h {
						t.Fatalf("frame %d: header %+v, want %+v", next+i, g, w.h)
					}
					if n := g.Carries(); n > 0 {
						dsts = append(dsts, make([]byte, n))
					}
				}
				if len(dsts) > 0 {
					if _, err := fr.payloads(dsts); err != nil {
						t.Fatalf("frames %d..: payloads: %v", next, err)
					}
				}
				k := 0
				for i := range got {
					if w := want[next+i]; len(w.payload) > 0 {
						if !bytes.Equal(dsts[k], w.payload) {
							t.Fatalf("frame %d (%d bytes): payload differs", next+i, len(w.payload))
						}
						k++
					}
				}
				next += len(got)
			}
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
			if fr.Buffered() != 0 {
				t.Fatalf("%d bytes buffered after the last frame", fr.Buffered())
			}
			// Bursts 2, 3, 6 are a group each, burst 5 two or more (a
			// group holds at most MaxGroup frames, a flush at most
			// maxPendingBytes); bursts 1 and 4 are plain frames.
			if groups < 5 {
				t.Fatalf("%d groups, %d plain frames: want at least 5 groups", groups, plain)
			}
			if plain != 3 {
				t.Fatalf("%d plain frames, want 3 (a lone frame, two READs)", plain)
			}
		})
	}
}

// FuzzGroupPayloads: the payloads of frames of any sizes the input
// picks, read together (frameReader.payloads) from a socket the sender
// writes in pieces of the sizes the input picks, land whole, in order,
// each in its own place; then the frame after them is read intact.
func FuzzGroupPayloads(f *testing.F) {
	f.Add([]byte{0, 0, 0, 1, 0x40, 0, 0, 0x10, 0xff}, []byte{3, 200, 1, 0, 90})
	f.Add([]byte{0x80, 0xff, 0x81, 0x00, 0x7f, 0xff, 0x00, 0x01}, []byte{255, 255, 1})
	f.Add([]byte{0x20, 0x00, 0x20, 0x00, 0x20, 0x00, 0x20, 0x00, 0x20, 0x00}, []byte{})
	const maxPieces = 1024
	f.Fuzz(func(t *testing.T, spec, pieces []byte) {
		var sizes []int
		for i := 0; i+1 < len(spec) && len(sizes) < 48; i += 2 {
			n := int(spec[i]&0x7f)<<8 | int(spec[i+1]) // up to 32 KiB - 1, ...
			if spec[i]&0x80 != 0 {
				n *= 5 // ... or up to 160 KiB
			}
			if n > 0 {
				sizes = append(sizes, n)
			}
		}
		if len(sizes) == 0 {
			return
		}
		// The payloads back to back, then one more frame with its own.
		var stream []byte
		var want [][]byte
		for i, n := range sizes {
			p := make([]byte, n)
			for j := range p {
				p[j] = byte(i*131 + j*7 + j>>9)
			}
			stream = append(stream, p...)
			want = append(want, p)
		}
		tail, tailPayloads := frameStream([]int{333})
		stream = append(stream, tail...)
		cli, srv := tcpPair(t)
		go func() {
			rest := stream
			for k := 0; len(rest) > 0; k++ {
				n := len(rest)
				// At most maxPieces writes: tiny pieces over megabytes
				// made one input run for a minute.
				if len(pieces) > 0 && k < maxPieces {
					n = min(n, 1+int(pieces[k%len(pieces)])*257)
				}
				if _, err := cli.Write(rest[:n]); err != nil {
					return
				}
				rest = rest[n:]
			}
		}()
		fr := newFrameReader(srv)
		dsts := make([][]byte, len(sizes))
		total := 0
		for i, n := range sizes {
			dsts[i] = make([]byte, n)
			total += n
		}
		if n, err := fr.payloads(dsts); err != nil || n != total {
			t.Fatalf("payloads: %d of %d bytes, %v", n, total, err)
		}
		for i := range dsts {
			if !bytes.Equal(dsts[i], want[i]) {
				t.Fatalf("payload %d of %d (%d bytes) differs", i, len(dsts), len(want[i]))
			}
		}
		var hb [wire.HeaderSize]byte
		if _, err := fr.header(hb[:]); err != nil {
			t.Fatalf("the frame after the group: header: %v", err)
		}
		var h wire.Header
		if err := h.Decode(hb[:]); err != nil || h.Length != 333 {
			t.Fatalf("the frame after the group: %+v, %v", h, err)
		}
		got := make([]byte, 333)
		if _, err := fr.payload(got); err != nil || !bytes.Equal(got, tailPayloads[0]) {
			t.Fatalf("the frame after the group: payload differs or %v", err)
		}
	})
}
