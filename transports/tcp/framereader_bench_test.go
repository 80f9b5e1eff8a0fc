package tcp

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"testing"

	"github.com/kvconnect/kvconnect/transports/tcp/internal/wire"
)

// BenchmarkFrameRead reads a stream of WRITE frames from a loopback
// socket as the target does (a header, then the payload into place),
// with the frameReader and, as the baseline in the same run, with the
// 16 KiB bufio.Reader it replaced: go test -run '^$' -bench FrameRead
// ./transports/tcp.
func BenchmarkFrameRead(b *testing.B) {
	for _, size := range []int{4 << 10, 16 << 10, 64 << 10} {
		for _, r := range []struct {
			name string
			open func(net.Conn) (header, payload func([]byte) (int, error))
		}{
			{"frameReader", func(nc net.Conn) (func([]byte) (int, error), func([]byte) (int, error)) {
				fr := newFrameReader(nc)
				return fr.header, fr.payload
			}},
			{"bufio", func(nc net.Conn) (func([]byte) (int, error), func([]byte) (int, error)) {
				br := bufio.NewReaderSize(nc, readBufferSize)
				read := func(p []byte) (int, error) { return io.ReadFull(br, p) }
				return read, read
			}},
		} {
			b.Run(fmt.Sprintf("%s/%dKiB", r.name, size>>10), func(b *testing.B) {
				cli, srv := tcpPair(b)
				// 64 frames written over and over, as a stream of them.
				var sizes []int
				for range 64 {
					sizes = append(sizes, size)
				}
				stream, _ := frameStream(sizes)
				go func() {
					for {
						if _, err := cli.Write(stream); err != nil {
							return
						}
					}
				}()
				header, payload := r.open(srv)
				mem := make([]byte, size)
				var hb [wire.HeaderSize]byte
				b.SetBytes(int64(size))
				b.ResetTimer()
				for range b.N {
					if _, err := header(hb[:]); err != nil {
						b.Fatal(err)
					}
					if _, err := payload(mem); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				srv.Close() // ends the writer
			})
		}
	}
}
