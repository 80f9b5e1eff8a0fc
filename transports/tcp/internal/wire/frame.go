// Package wire is the binary framing of kvconnect's TCP data transport.
//
// Every frame starts with a fixed 40-byte little-endian header:
//
//	offset size field
//	0      4    magic   "KVCN" (0x4E43564B little-endian)
//	4      1    version (1)
//	5      1    op      (1 WRITE, 2 READ, 3 group, 0x81 WRITE ack,
//	            0x82 READ response)
//	6      2    status in responses (0 OK; see Status); flags in requests
//	            (FlagFlush, FlagGroups)
//	8      8    request id (echoed in the response)
//	16     8    region id (0 = offset is an absolute address); in
//	            responses, the responder's features (FeatureGroups)
//	24     8    offset within the region, or absolute address
//	32     8    payload length
//
// A WRITE is followed by length payload bytes and answered by a WRITE ack
// without payload. A READ carries no payload and is answered by a READ
// response followed by length payload bytes when status is OK (length 0
// otherwise). Responses on one connection come in request order.
//
// # Groups
//
// A group carries several frames with their headers first: a group
// header (op 3, length n*HeaderSize, every other field 0), the n frames'
// headers back to back (requests only, or responses only; no group
// inside a group), then the payloads those frames carry, in order. It
// means exactly what the n frames sent one after another mean; what it
// buys is that the reader knows where every payload goes before it reads
// any, and reads many payloads with one system call (a readv of their
// destinations) instead of one per frame.
//
// Groups are negotiated per connection, and a v1 peer never sees one:
// an initiator that reads groups sets FlagGroups on its requests, and a
// target that reads groups sets FeatureGroups in its responses' region
// field (a v1 initiator ignores that field, a v1 target ignores unknown
// flags). A target sends groups only to an initiator whose requests
// carried FlagGroups; an initiator sends groups only after a response
// carried FeatureGroups.
package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// HeaderSize is the size of a frame header in bytes.
const HeaderSize = 40

// Magic identifies a kvconnect frame: the bytes "KVCN".
const Magic uint32 = 0x4E43564B

// Version is the framing version this package speaks.
const Version uint8 = 1

// MaxLength bounds the payload of one frame (a chunk): 256 MiB.
const MaxLength = 256 << 20

// Op is a frame's operation.
type Op uint8

const (
	OpWrite    Op = 0x01
	OpRead     Op = 0x02
	OpGroup    Op = 0x03
	OpWriteAck Op = 0x81
	OpReadResp Op = 0x82
)

func (o Op) String() string {
	switch o {
	case OpWrite:
		return "WRITE"
	case OpRead:
		return "READ"
	case OpGroup:
		return "GROUP"
	case OpWriteAck:
		return "WRITE_ACK"
	case OpReadResp:
		return "READ_RESP"
	}
	return fmt.Sprintf("Op(0x%02x)", uint8(o))
}

// IsResponse reports whether o is a response op.
func (o Op) IsResponse() bool { return o&0x80 != 0 }

// Status is the outcome carried in a response header.
type Status uint16

const (
	StatusOK            Status = 0
	StatusOutOfBounds   Status = 1 // range not inside the region
	StatusUnknownRegion Status = 2 // no such region id / no region at that address
	StatusBadRequest    Status = 3 // malformed request
	StatusShuttingDown  Status = 4 // the owner is closing
)

func (s Status) String() string {
	switch s {
	case StatusOK:
		return "ok"
	case StatusOutOfBounds:
		return "out of bounds"
	case StatusUnknownRegion:
		return "unknown region"
	case StatusBadRequest:
		return "bad request"
	case StatusShuttingDown:
		return "shutting down"
	}
	return fmt.Sprintf("status %d", uint16(s))
}

// FlagFlush, in a request's status field, asks the target to send every
// response it holds once it has answered this request. The initiator sets
// it on the last request of each burst, so a burst is answered with one
// write instead of one per request.
const FlagFlush Status = 0x0001

// FlagGroups, in a request's status field, says the initiator reads
// groups of responses (see Groups in the package comment).
const FlagGroups Status = 0x0002

// FeatureGroups, in a response's region field, says the target reads
// groups of requests (see Groups in the package comment).
const FeatureGroups uint64 = 1

// MaxGroup bounds the frames in one group: a group's header table is at
// most MaxGroup*HeaderSize (10 KiB) bytes.
const MaxGroup = 256

// Header is a decoded frame header.
type Header struct {
	Op     Op
	Status Status
	ReqID  uint64
	Region uint64
	Offset uint64
	Length uint64
}

// Decoding errors.
var (
	ErrBadMagic   = errors.New("wire: bad magic")
	ErrBadVersion = errors.New("wire: unsupported version")
	ErrBadOp      = errors.New("wire: unknown op")
	ErrTooLong    = errors.New("wire: payload too long")
	ErrShort      = errors.New("wire: short header")
	ErrBadGroup   = errors.New("wire: bad group")
)

// Encode writes h into b, which must be at least HeaderSize bytes.
func (h *Header) Encode(b []byte) {
	_ = b[HeaderSize-1]
	binary.LittleEndian.PutUint32(b[0:4], Magic)
	b[4] = Version
	b[5] = uint8(h.Op)
	binary.LittleEndian.PutUint16(b[6:8], uint16(h.Status))
	binary.LittleEndian.PutUint64(b[8:16], h.ReqID)
	binary.LittleEndian.PutUint64(b[16:24], h.Region)
	binary.LittleEndian.PutUint64(b[24:32], h.Offset)
	binary.LittleEndian.PutUint64(b[32:40], h.Length)
}

// Decode parses and validates a header from b into h.
func (h *Header) Decode(b []byte) error {
	if len(b) < HeaderSize {
		return fmt.Errorf("%w: %d of %d bytes", ErrShort, len(b), HeaderSize)
	}
	if m := binary.LittleEndian.Uint32(b[0:4]); m != Magic {
		return fmt.Errorf("%w: 0x%08x", ErrBadMagic, m)
	}
	if v := b[4]; v != Version {
		return fmt.Errorf("%w: %d (this side speaks %d)", ErrBadVersion, v, Version)
	}
	op := Op(b[5])
	switch op {
	case OpWrite, OpRead, OpWriteAck, OpReadResp, OpGroup:
	default:
		return fmt.Errorf("%w: 0x%02x", ErrBadOp, uint8(op))
	}
	length := binary.LittleEndian.Uint64(b[32:40])
	if length > MaxLength {
		return fmt.Errorf("%w: %d bytes (max %d)", ErrTooLong, length, MaxLength)
	}
	if op == OpGroup && (length == 0 || length%HeaderSize != 0 || length > MaxGroup*HeaderSize) {
		return fmt.Errorf("%w: a group of %d header bytes (a multiple of %d, at most %d frames)", ErrBadGroup, length, HeaderSize, MaxGroup)
	}
	*h = Header{
		Op:     op,
		Status: Status(binary.LittleEndian.Uint16(b[6:8])),
		ReqID:  binary.LittleEndian.Uint64(b[8:16]),
		Region: binary.LittleEndian.Uint64(b[16:24]),
		Offset: binary.LittleEndian.Uint64(b[24:32]),
		Length: length,
	}
	return nil
}

// GroupHeader is the header of a group of n frames.
func GroupHeader(n int) Header {
	return Header{Op: OpGroup, Length: uint64(n) * HeaderSize}
}

// Frames is how many frames a group header announces.
func (h *Header) Frames() int { return int(h.Length / HeaderSize) }

// Carries is how many payload bytes follow the frame's header on the
// wire: a WRITE's and a READ response's length, 0 for the others.
func (h *Header) Carries() uint64 {
	if h.Op == OpWrite || h.Op == OpReadResp {
		return h.Length
	}
	return 0
}

// DecodeGroup decodes a group's header table b (what its group header's
// length announced) into hs, appended from hs[:0], and returns it. Every
// header must be valid, none a group, and all requests or, with
// responses set, all responses.
func DecodeGroup(b []byte, hs []Header, responses bool) ([]Header, error) {
	if len(b) == 0 || len(b)%HeaderSize != 0 || len(b) > MaxGroup*HeaderSize {
		return hs[:0], fmt.Errorf("%w: a table of %d bytes", ErrBadGroup, len(b))
	}
	hs = hs[:0]
	for off := 0; off < len(b); off += HeaderSize {
		var h Header
		if err := h.Decode(b[off:]); err != nil {
			return hs, fmt.Errorf("frame %d of the group: %w", off/HeaderSize, err)
		}
		switch {
		case h.Op == OpGroup:
			return hs, fmt.Errorf("%w: frame %d is a group", ErrBadGroup, off/HeaderSize)
		case h.Op.IsResponse() != responses:
			return hs, fmt.Errorf("%w: frame %d is a %s in a group of %s", ErrBadGroup, off/HeaderSize, h.Op, kinds(responses))
		}
		hs = append(hs, h)
	}
	return hs, nil
}

func kinds(responses bool) string {
	if responses {
		return "responses"
	}
	return "requests"
}
