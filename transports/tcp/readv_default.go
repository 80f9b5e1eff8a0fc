//go:build !linux

package tcp

import (
	"sync/atomic"

	"github.com/kvconnect/kvconnect/internal/spin"
)

// vectorReadsHere: this platform reads frames with plain reads.
const vectorReadsHere = false

func (*rawIO) readv(a, b []byte) (int, int, error) { return 0, 0, errNoRawIO }

func (*rawIO) readvN([][]byte) (int, error) { return 0, errNoRawIO }

func (*rawIO) readSpin([]byte, spin.Spinner, *atomic.Bool) (int, bool, error) {
	return 0, false, errNoRawIO
}
