package plugins

import (
	"encoding/binary"
	"fmt"
)

// opRecordSize is the size of one op in a packed TransferRequest.
const opRecordSize = 41

// MaxBatchOps bounds the ops in one batch, in-process and through a
// plugin alike (a packed batch of this many ops is 2.7 MB, within
// grpcMaxMessage with room for one error per op in the reply).
const MaxBatchOps = 1 << 16

// grpcMaxMessage is the gRPC message limit between host and plugin (both
// ways) unless LaunchConfig.GRPCMaxMessageSize sets another.
const grpcMaxMessage = 64 << 20

// appendOps packs ops for the wire (see TransferRequest.ops).
func appendOps(b []byte, ops []Op) []byte {
	for i := range ops {
		o := &ops[i]
		var r [opRecordSize]byte
		r[0] = byte(o.Kind)
		binary.LittleEndian.PutUint64(r[1:], uint64(o.LocalRegion))
		binary.LittleEndian.PutUint64(r[9:], o.LocalOffset)
		binary.LittleEndian.PutUint64(r[17:], uint64(o.RemoteRegion))
		binary.LittleEndian.PutUint64(r[25:], o.RemoteOffset)
		binary.LittleEndian.PutUint64(r[33:], o.Length)
		b = append(b, r[:]...)
	}
	return b
}

// decodeOps unpacks ops packed by appendOps into dst (reused if big enough).
func decodeOps(dst []Op, b []byte) ([]Op, error) {
	if len(b)%opRecordSize != 0 {
		return nil, fmt.Errorf("packed ops of %d bytes: not a multiple of %d: %w", len(b), opRecordSize, ErrProtocol)
	}
	n := len(b) / opRecordSize
	if n > MaxBatchOps {
		return nil, fmt.Errorf("batch of %d ops: more than %d: %w", n, MaxBatchOps, ErrInvalidArgument)
	}
	if cap(dst) < n {
		dst = make([]Op, n)
	}
	dst = dst[:n]
	for i := range dst {
		r := b[i*opRecordSize : (i+1)*opRecordSize]
		dst[i] = Op{
			Kind:         OpKind(r[0]),
			LocalRegion:  RegionID(binary.LittleEndian.Uint64(r[1:])),
			LocalOffset:  binary.LittleEndian.Uint64(r[9:]),
			RemoteRegion: RegionID(binary.LittleEndian.Uint64(r[17:])),
			RemoteOffset: binary.LittleEndian.Uint64(r[25:]),
			Length:       binary.LittleEndian.Uint64(r[33:]),
		}
	}
	return dst, nil
}
