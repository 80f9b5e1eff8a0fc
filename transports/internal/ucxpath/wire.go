package ucxpath

import (
	"encoding/binary"
	"fmt"

	"github.com/kvconnect/kvconnect/plugins"
)

// The byte formats this transport publishes and exchanges. All integers
// are little-endian; every decoder checks lengths before reading.

// place is where a process runs: its pid, the host's kernel boot id and
// the pid namespace. Two processes are on the same host when their boot
// ids are equal, and see each other's pids when their pid namespaces are
// equal too (then a pid's liveness means something, and cma can work).
type place struct {
	pid   uint32
	boot  [16]byte
	pidNS uint64
}

const placeLen = 28

func (p place) append(b []byte) []byte {
	b = binary.LittleEndian.AppendUint32(b, p.pid)
	b = append(b, p.boot[:]...)
	return binary.LittleEndian.AppendUint64(b, p.pidNS)
}

func decodePlace(b []byte) place {
	var p place
	p.pid = binary.LittleEndian.Uint32(b)
	copy(p.boot[:], b[4:20])
	p.pidNS = binary.LittleEndian.Uint64(b[20:])
	return p
}

// sameHost reports whether p and q run on one host (kernel boot).
func (p place) sameHost(q place) bool { return p.boot == q.boot && p.boot != [16]byte{} }

// samePIDs reports whether p and q run on one host in one pid namespace.
func (p place) samePIDs(q place) bool { return p.sameHost(q) && p.pidNS == q.pidNS && p.pidNS != 0 }

// endpoint is what InitResult.Endpoint carries: who the node is and its
// packed UCP worker address.
type endpoint struct {
	sharedMemoryOnly bool   // the node's lanes reach only its own host
	where            place  // the node's process (the plugin's, for a plugin)
	worker           []byte // ucp_worker_get_address
}

const endpointHeader = 6 + placeLen

var endpointMagic = [4]byte{'K', 'V', 'U', 'X'}

const endpointVersion = 1

func (e endpoint) encode() []byte {
	b := make([]byte, 0, endpointHeader+len(e.worker))
	b = append(b, endpointMagic[:]...)
	b = append(b, endpointVersion)
	var flags byte
	if e.sharedMemoryOnly {
		flags |= 1
	}
	b = append(b, flags)
	b = e.where.append(b)
	return append(b, e.worker...)
}

func decodeEndpoint(b []byte) (endpoint, error) {
	var e endpoint
	if len(b) < endpointHeader || [4]byte(b[:4]) != endpointMagic {
		return e, fmt.Errorf("ucx: endpoint is not a ucx endpoint (%d bytes): %w", len(b), plugins.ErrInvalidArgument)
	}
	if b[4] != endpointVersion {
		return e, fmt.Errorf("ucx: endpoint version %d, this build speaks %d: %w", b[4], endpointVersion, plugins.ErrProtocol)
	}
	if len(b) == endpointHeader {
		return e, fmt.Errorf("ucx: endpoint has no worker address: %w", plugins.ErrInvalidArgument)
	}
	e.sharedMemoryOnly = b[5]&1 != 0
	e.where = decodePlace(b[6:])
	e.worker = b[endpointHeader:]
	return e, nil
}

// regionKey is what RegisterRegion returns and peers get as
// RemoteRegion.Key: the address UCX must be given for the region (the
// address in the process that mapped it, which for a plugin is not the
// host's published address), its length, a token naming this
// registration, and the packed rkey.
type regionKey struct {
	token  uint64
	va     uint64
	length uint64
	rkey   []byte
}

const regionKeyVersion = 1

func (k regionKey) encode() []byte {
	b := make([]byte, 0, 32+len(k.rkey))
	b = append(b, regionKeyVersion, 0, 0, 0, 0, 0, 0, 0)
	b = binary.LittleEndian.AppendUint64(b, k.token)
	b = binary.LittleEndian.AppendUint64(b, k.va)
	b = binary.LittleEndian.AppendUint64(b, k.length)
	return append(b, k.rkey...)
}

func decodeRegionKey(b []byte) (regionKey, error) {
	var k regionKey
	if len(b) <= 32 {
		return k, fmt.Errorf("ucx: region key of %d bytes is too short: %w", len(b), plugins.ErrProtocol)
	}
	if b[0] != regionKeyVersion {
		return k, fmt.Errorf("ucx: region key version %d, this build speaks %d: %w", b[0], regionKeyVersion, plugins.ErrProtocol)
	}
	k.token = binary.LittleEndian.Uint64(b[8:])
	k.va = binary.LittleEndian.Uint64(b[16:])
	k.length = binary.LittleEndian.Uint64(b[24:])
	k.rkey = b[32:]
	if k.length == 0 || k.va+k.length < k.va {
		return k, fmt.Errorf("ucx: region key range 0x%x+%d is invalid: %w", k.va, k.length, plugins.ErrProtocol)
	}
	return k, nil
}

// Control messages travel as UCP active messages between the side that
// owns memory (the "owner") and a side that connected to it (a "client"):
//
//	client -> owner  hello    I am client c at this worker address
//	owner  -> client welcome  these of my regions are live (maybe in parts)
//	owner  -> client revoke   stop using these regions (or all: closing)
//	client -> owner  ack      done: nothing of mine still touches them
//	client -> owner  bye      forget me
//
// With one-sided RMA the owner cannot refuse an access, and over UCX's
// tcp and cma lanes nothing rejects an address that was unmapped, so an
// owner deregisters a region (or closes) only after every client
// acknowledged its revoke.
type msgType uint8

const (
	msgHello msgType = iota + 1
	msgWelcome
	msgRevoke
	msgAck
	msgBye
)

func (t msgType) String() string {
	switch t {
	case msgHello:
		return "hello"
	case msgWelcome:
		return "welcome"
	case msgRevoke:
		return "revoke"
	case msgAck:
		return "ack"
	case msgBye:
		return "bye"
	}
	return fmt.Sprintf("msgType(%d)", uint8(t))
}

// Revoke reasons.
const (
	revokeDeregistered uint8 = 1 // the regions listed were deregistered
	revokeClosing      uint8 = 2 // the owner is closing: all its regions
)

const msgMagic = 'k'
const msgVersion = 1

// liveRegion names one registration: a region id and its token.
type liveRegion struct {
	id    plugins.RegionID
	token uint64
}

// message is a decoded control message; which fields are set depends on
// typ.
type message struct {
	typ     msgType
	client  uint64
	seq     uint64       // revoke, ack
	reason  uint8        // revoke
	more    bool         // welcome: further parts follow
	where   place        // hello
	worker  []byte       // hello
	regions []liveRegion // welcome, revoke
}

// maxRegionsPerMessage keeps a welcome or revoke within ucx.MaxMessage.
const maxRegionsPerMessage = 2048

func (m message) encode() []byte {
	b := make([]byte, 0, 64+len(m.worker)+16*len(m.regions))
	b = append(b, msgMagic, msgVersion, byte(m.typ), 0)
	b = binary.LittleEndian.AppendUint64(b, m.client)
	switch m.typ {
	case msgHello:
		b = m.where.append(b)
		b = append(b, m.worker...)
	case msgWelcome, msgRevoke:
		b = binary.LittleEndian.AppendUint64(b, m.seq)
		more := byte(0)
		if m.more {
			more = 1
		}
		b = append(b, m.reason, more)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(m.regions)))
		for _, r := range m.regions {
			b = binary.LittleEndian.AppendUint64(b, uint64(r.id))
			b = binary.LittleEndian.AppendUint64(b, r.token)
		}
	case msgAck:
		b = binary.LittleEndian.AppendUint64(b, m.seq)
	}
	return b
}

func decodeMessage(b []byte) (message, error) {
	var m message
	bad := func(what string) (message, error) {
		return message{}, fmt.Errorf("ucx: control message (%d bytes): %s: %w", len(b), what, plugins.ErrProtocol)
	}
	if len(b) < 12 || b[0] != msgMagic {
		return bad("not a kvconnect message")
	}
	if b[1] != msgVersion {
		return bad(fmt.Sprintf("version %d, this build speaks %d", b[1], msgVersion))
	}
	m.typ = msgType(b[2])
	m.client = binary.LittleEndian.Uint64(b[4:])
	rest := b[12:]
	switch m.typ {
	case msgHello:
		if len(rest) <= placeLen {
			return bad("short hello")
		}
		m.where = decodePlace(rest)
		m.worker = rest[placeLen:]
	case msgWelcome, msgRevoke:
		if len(rest) < 14 {
			return bad("short " + m.typ.String())
		}
		m.seq = binary.LittleEndian.Uint64(rest)
		m.reason = rest[8]
		m.more = rest[9] != 0
		n := binary.LittleEndian.Uint32(rest[10:])
		rest = rest[14:]
		if uint64(n) > maxRegionsPerMessage || uint64(len(rest)) != 16*uint64(n) {
			return bad(fmt.Sprintf("%s lists %d regions in %d bytes", m.typ, n, len(rest)))
		}
		m.regions = make([]liveRegion, n)
		for i := range m.regions {
			m.regions[i] = liveRegion{id: plugins.RegionID(binary.LittleEndian.Uint64(rest[16*i:])), token: binary.LittleEndian.Uint64(rest[16*i+8:])}
		}
	case msgAck:
		if len(rest) != 8 {
			return bad("ack is not 8 bytes")
		}
		m.seq = binary.LittleEndian.Uint64(rest)
	case msgBye:
		if len(rest) != 0 {
			return bad("bye carries data")
		}
	default:
		return bad(fmt.Sprintf("unknown type %d", b[2]))
	}
	return m, nil
}
