package pluginrpc

import (
	"encoding/binary"
	"fmt"

	"github.com/kvconnect/kvconnect/errdefs"
)

// OpRecordSize is the size of one op in a packed TransferRequest: kind u8,
// then local region, local offset, remote region, remote offset and
// length, each a little-endian u64.
const OpRecordSize = 41

// MaxOps bounds the ops in one batch (a packed batch of this many ops is
// 2.7 MB, within DefaultMaxMessage with room for one error per op in the
// reply).
const MaxOps = 1 << 16

// Op is one op as it travels between host and plugin.
type Op struct {
	Kind         uint8
	LocalRegion  uint64
	LocalOffset  uint64
	RemoteRegion uint64
	RemoteOffset uint64
	Length       uint64
}

// AppendOp packs o onto b.
func AppendOp(b []byte, o Op) []byte {
	var r [OpRecordSize]byte
	r[0] = o.Kind
	binary.LittleEndian.PutUint64(r[1:], o.LocalRegion)
	binary.LittleEndian.PutUint64(r[9:], o.LocalOffset)
	binary.LittleEndian.PutUint64(r[17:], o.RemoteRegion)
	binary.LittleEndian.PutUint64(r[25:], o.RemoteOffset)
	binary.LittleEndian.PutUint64(r[33:], o.Length)
	return append(b, r[:]...)
}

// CountOps checks packed ops and returns how many b holds.
func CountOps(b []byte) (int, error) {
	if len(b)%OpRecordSize != 0 {
		return 0, fmt.Errorf("packed ops of %d bytes: not a multiple of %d: %w", len(b), OpRecordSize, errdefs.ErrProtocol)
	}
	n := len(b) / OpRecordSize
	if n > MaxOps {
		return 0, fmt.Errorf("batch of %d ops: more than %d: %w", n, MaxOps, errdefs.ErrInvalidArgument)
	}
	return n, nil
}

// DecodeOp unpacks op i of packed ops b; b must hold it (see CountOps).
func DecodeOp(b []byte, i int) Op {
	r := b[i*OpRecordSize : (i+1)*OpRecordSize]
	return Op{
		Kind:         r[0],
		LocalRegion:  binary.LittleEndian.Uint64(r[1:]),
		LocalOffset:  binary.LittleEndian.Uint64(r[9:]),
		RemoteRegion: binary.LittleEndian.Uint64(r[17:]),
		RemoteOffset: binary.LittleEndian.Uint64(r[25:]),
		Length:       binary.LittleEndian.Uint64(r[33:]),
	}
}
