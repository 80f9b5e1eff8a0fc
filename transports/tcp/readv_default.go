//go:build !linux

package tcp

import (
	"errors"
	"net"
	"sync/atomic"

	"github.com/kvconnect/kvconnect/internal/spin"
)

// vectorReadsHere: this platform reads frames with plain reads.
const vectorReadsHere = false

// vectorReader would read into two buffers in one system call: not
// built on this platform, where frames are read with plain reads.
type vectorReader struct{}

// newVectorReader is nil: no readv here.
func newVectorReader(net.Conn) *vectorReader { return nil }

func (*vectorReader) read(a, b []byte) (int, int, error) {
	return 0, 0, errors.New("tcp: no readv on this platform")
}

func (*vectorReader) readSpin([]byte, spin.Spinner, *atomic.Bool) (int, bool, error) {
	return 0, false, errors.New("tcp: no readv on this platform")
}
