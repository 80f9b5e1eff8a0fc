// Package wire is the binary framing of kvconnect's TCP data transport.
//
// Every frame starts with a fixed 40-byte little-endian header:
//
//	offset size field
//	0      4    magic   "KVCN" (0x4E43564B little-endian)
//	4      1    version (1)
//	5      1    op      (1 WRITE, 2 READ, 0x81 WRITE ack, 0x82 READ response)
//	6      2    status in responses (0 OK; see Status); flags in requests
//	            (FlagFlush)
//	8      8    request id (echoed in the response)
//	16     8    region id (0 = offset is an absolute address)
//	24     8    offset within the region, or absolute address
//	32     8    payload length
//
// A WRITE is followed by length payload bytes and answered by a WRITE ack
// without payload. A READ carries no payload and is answered by a READ
// response followed by length payload bytes when status is OK (length 0
// otherwise). Responses on one connection come in request order.
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
	OpWriteAck Op = 0x81
	OpReadResp Op = 0x82
)

func (o Op) String() string {
	switch o {
	case OpWrite:
		return "WRITE"
	case OpRead:
		return "READ"
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
	case OpWrite, OpRead, OpWriteAck, OpReadResp:
	default:
		return fmt.Errorf("%w: 0x%02x", ErrBadOp, uint8(op))
	}
	length := binary.LittleEndian.Uint64(b[32:40])
	if length > MaxLength {
		return fmt.Errorf("%w: %d bytes (max %d)", ErrTooLong, length, MaxLength)
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
