// Package mcwire is Mooncake Transfer Engine's TCP data protocol (classic
// TE, protocol versions 1 and 2), as the tcp transport serves and speaks
// it to unmodified Mooncake peers.
//
// Every request starts with a 24-byte header, the C struct
// {u64 size; u64 addr; u8 opcode} written raw: size and addr
// little-endian, addr the target's absolute virtual address, opcode 0
// READ or 1 WRITE, OR 0x80 for protocol v2; the last 7 bytes are struct
// padding that Mooncake leaves uninitialised (never read them). A WRITE is
// followed by size payload bytes; a READ is answered by size bytes. In v2
// the target also sends an 8-byte little-endian status word: StatusOK or
// StatusRejected, for a WRITE once the payload is in memory, for a READ
// before the data. In v1 there is no status: a rejected request just
// closes the connection. The target serves the requests of a connection
// one after another.
package mcwire

import (
	"encoding/binary"
	"fmt"

	"github.com/kvconnect/kvconnect/errdefs"
)

// HeaderSize is the size of a request header.
const HeaderSize = 24

// StatusSize is the size of a v2 status word.
const StatusSize = 8

// Opcodes.
const (
	OpRead  uint8 = 0
	OpWrite uint8 = 1
	// FlagV2 marks a protocol v2 request.
	FlagV2 uint8 = 0x80
)

// Status words (v2).
const (
	StatusOK       uint64 = 0x4D43545600000000 // "MCTV", ok
	StatusRejected uint64 = 0x4D43545600000001 // address rejected
	statusMagic    uint64 = 0x4D43545600000000
)

// Header is one request.
type Header struct {
	Size  uint64
	Addr  uint64
	Write bool // WRITE; else READ (Mooncake reads any other opcode as READ)
	V2    bool
}

// Encode writes h into b, zeroing the padding.
func (h Header) Encode(b *[HeaderSize]byte) {
	binary.LittleEndian.PutUint64(b[0:], h.Size)
	binary.LittleEndian.PutUint64(b[8:], h.Addr)
	op := OpRead
	if h.Write {
		op = OpWrite
	}
	if h.V2 {
		op |= FlagV2
	}
	b[16] = op
	clear(b[17:])
}

// Decode parses a header. Like Mooncake's server it reads any opcode
// other than WRITE as READ, and it never looks at the padding. A size of 0
// is an error wrapping errdefs.ErrProtocol (Mooncake's server rejects it
// too); the address range is the caller's to check.
func Decode(b []byte) (Header, error) {
	if len(b) < HeaderSize {
		return Header{}, fmt.Errorf("mooncake: header of %d bytes, want %d: %w", len(b), HeaderSize, errdefs.ErrProtocol)
	}
	h := Header{
		Size:  binary.LittleEndian.Uint64(b[0:]),
		Addr:  binary.LittleEndian.Uint64(b[8:]),
		Write: b[16]&^FlagV2 == OpWrite,
		V2:    b[16]&FlagV2 != 0,
	}
	if h.Size == 0 {
		return h, fmt.Errorf("mooncake: request of size 0: %w", errdefs.ErrProtocol)
	}
	return h, nil
}

// EncodeStatus writes a v2 status word.
func EncodeStatus(b *[StatusSize]byte, st uint64) { binary.LittleEndian.PutUint64(b[:], st) }

// DecodeStatus parses a v2 status word: nil for StatusOK, an error
// wrapping errdefs.ErrUnknownRegion and errdefs.ErrOutOfBounds for
// StatusRejected (Mooncake's "no registered buffer holds the range" does
// not say which), and errdefs.ErrProtocol for anything else.
func DecodeStatus(b []byte) error {
	if len(b) != StatusSize {
		return fmt.Errorf("mooncake: status word of %d bytes: %w", len(b), errdefs.ErrProtocol)
	}
	st := binary.LittleEndian.Uint64(b)
	switch {
	case st == StatusOK:
		return nil
	case st == StatusRejected:
		return fmt.Errorf("mooncake: the peer rejected the address range, no buffer registered there holds it (status 1): %w: %w", errdefs.ErrUnknownRegion, errdefs.ErrOutOfBounds)
	case st&0xFFFFFFFF00000000 != statusMagic:
		return fmt.Errorf("mooncake: status word %#x is not a protocol v2 status (the peer speaks v1?): %w", st, errdefs.ErrProtocol)
	}
	return fmt.Errorf("mooncake: unknown status %d: %w", st&0xFFFFFFFF, errdefs.ErrProtocol)
}

// IsKVConnect reports whether the first 4 bytes of a connection are
// kvconnect's frame magic ("KVCN") rather than a Mooncake header. A
// Mooncake request whose size's low 32 bits are 0x4E43564B (1,313,056,331
// bytes plus a multiple of 4 GiB) would be taken for kvconnect's framing
// and refused; no Mooncake client sends one in practice.
func IsKVConnect(first4 []byte) bool {
	return len(first4) >= 4 && first4[0] == 'K' && first4[1] == 'V' && first4[2] == 'C' && first4[3] == 'N'
}
