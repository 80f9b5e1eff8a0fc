package simpletcp

import (
	"encoding/binary"
	"fmt"

	"github.com/kvconnect/kvconnect/plugins"
)

// The wire, one request at a time per connection:
//
//	request:  op u8 (0 READ, 1 WRITE) | region u64 | offset u64 | length u64 (little-endian)
//	          then, for WRITE, length payload bytes
//	response: status u8, then, for a READ with status OK, length bytes
const headerSize = 25

// maxLength bounds one op on the wire.
const maxLength = 1 << 30

// Response statuses.
const (
	statusOK            byte = 0
	statusOutOfBounds   byte = 1
	statusUnknownRegion byte = 2
	statusBadRequest    byte = 3
)

type header struct {
	op     plugins.OpKind
	region uint64
	offset uint64
	length uint64
}

func (h header) encode(b *[headerSize]byte) {
	b[0] = byte(h.op)
	binary.LittleEndian.PutUint64(b[1:], h.region)
	binary.LittleEndian.PutUint64(b[9:], h.offset)
	binary.LittleEndian.PutUint64(b[17:], h.length)
}

// decodeHeader parses a request header; a bad one wraps ErrProtocol.
func decodeHeader(b []byte) (header, error) {
	if len(b) != headerSize {
		return header{}, fmt.Errorf("simpletcp: header of %d bytes: %w", len(b), plugins.ErrProtocol)
	}
	h := header{op: plugins.OpKind(b[0]), region: binary.LittleEndian.Uint64(b[1:]),
		offset: binary.LittleEndian.Uint64(b[9:]), length: binary.LittleEndian.Uint64(b[17:])}
	switch {
	case h.op != plugins.OpRead && h.op != plugins.OpWrite:
		return h, fmt.Errorf("simpletcp: op %d: %w", b[0], plugins.ErrProtocol)
	case h.length == 0 || h.length > maxLength:
		return h, fmt.Errorf("simpletcp: length %d: %w", h.length, plugins.ErrProtocol)
	}
	return h, nil
}
