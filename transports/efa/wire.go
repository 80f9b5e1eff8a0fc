package efa

import (
	"encoding/binary"
	"fmt"

	"github.com/kvconnect/kvconnect/plugins"
)

// The two blobs this transport publishes: the endpoint (InitResult.Endpoint,
// given back in PeerInfo.Endpoint) and a region's key (RegisterRegion's
// result, given back in RemoteRegion.Key). Both come from the network, so
// decoding them checks every length and never trusts a field.

const (
	endpointMagic   = "kvefa"
	endpointVersion = 1
	keyVersion      = 1

	// keyHeader is version(1) flags(1) rawLen(2) key(8) base(8) size(8)
	// slot(4) token(8).
	keyHeader = 40
	// maxRawKey bounds a raw (FI_MR_RAW) key; providers use a few dozen
	// bytes.
	maxRawKey = 1024
	// maxAddr bounds a provider address (fi_getname); EFA's is 32 bytes,
	// sockaddr_in6 28, shm's string well under 256.
	maxAddr = 4096
)

// key flags.
const (
	keyFlagVirtAddr = 1 << 0 // base is the registering process's virtual address (FI_MR_VIRT_ADDR)
	keyFlagRaw      = 1 << 1 // raw holds an FI_MR_RAW key to map with fi_mr_map_raw
)

// endpoint is what a node publishes so peers can reach it.
type endpoint struct {
	Provider   string // fabric_attr->prov_name, e.g. "tcp;ofi_rxm"
	AddrFormat uint32 // info->addr_format
	Addr       []byte // fi_getname
	// Status is the key of the node's region status table: one 8-byte
	// token per registered region (0 when free), readable by peers, so an
	// initiator whose op failed or stalled can ask whether the region is
	// still registered.
	Status regionKey
}

func (e endpoint) marshal() []byte {
	status := e.Status.marshal()
	b := make([]byte, 0, len(endpointMagic)+1+4+1+len(e.Provider)+2+len(e.Addr)+2+len(status))
	b = append(b, endpointMagic...)
	b = append(b, endpointVersion)
	b = binary.LittleEndian.AppendUint32(b, e.AddrFormat)
	b = append(b, byte(len(e.Provider)))
	b = append(b, e.Provider...)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(e.Addr)))
	b = append(b, e.Addr...)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(status)))
	b = append(b, status...)
	return b
}

func parseEndpoint(b []byte) (endpoint, error) {
	bad := func(why string) (endpoint, error) {
		return endpoint{}, fmt.Errorf("efa: peer endpoint (%d bytes) is not an efa endpoint: %s: %w", len(b), why, plugins.ErrInvalidArgument)
	}
	if len(b) < len(endpointMagic)+1+4+1 || string(b[:len(endpointMagic)]) != endpointMagic {
		return bad("bad magic")
	}
	p := b[len(endpointMagic):]
	if p[0] != endpointVersion {
		return bad(fmt.Sprintf("version %d, this transport speaks %d", p[0], endpointVersion))
	}
	var e endpoint
	e.AddrFormat = binary.LittleEndian.Uint32(p[1:5])
	n := int(p[5])
	p = p[6:]
	if n == 0 || len(p) < n+2 {
		return bad("truncated provider name")
	}
	e.Provider = string(p[:n])
	p = p[n:]
	alen := int(binary.LittleEndian.Uint16(p))
	p = p[2:]
	if alen == 0 || alen > maxAddr || len(p) < alen+2 {
		return bad(fmt.Sprintf("address length %d with %d bytes left", alen, len(p)))
	}
	e.Addr = append([]byte(nil), p[:alen]...)
	p = p[alen:]
	slen := int(binary.LittleEndian.Uint16(p))
	p = p[2:]
	if len(p) != slen {
		return bad(fmt.Sprintf("status key length %d with %d bytes left", slen, len(p)))
	}
	st, err := parseKey(p)
	if err != nil {
		return bad("status table: " + err.Error())
	}
	if st.Size%8 != 0 {
		return bad(fmt.Sprintf("status table of %d bytes is not a whole number of slots", st.Size))
	}
	e.Status = st
	return e, nil
}

// regionKey is what a peer needs to reach one registered region.
type regionKey struct {
	Flags byte
	Key   uint64 // fi_mr_key (unused when the key is raw)
	Base  uint64 // the RMA address of the region's first byte
	Size  uint64
	Raw   []byte // FI_MR_RAW key
	// Slot and Token locate the region in its owner's status table: the
	// slot holds Token while this registration lives.
	Slot  uint32
	Token uint64
}

func (k regionKey) marshal() []byte {
	b := make([]byte, keyHeader, keyHeader+len(k.Raw))
	b[0] = keyVersion
	b[1] = k.Flags
	binary.LittleEndian.PutUint16(b[2:], uint16(len(k.Raw)))
	binary.LittleEndian.PutUint64(b[4:], k.Key)
	binary.LittleEndian.PutUint64(b[12:], k.Base)
	binary.LittleEndian.PutUint64(b[20:], k.Size)
	binary.LittleEndian.PutUint32(b[28:], k.Slot)
	binary.LittleEndian.PutUint64(b[32:], k.Token)
	return append(b, k.Raw...)
}

func parseKey(b []byte) (regionKey, error) {
	bad := func(why string) (regionKey, error) {
		return regionKey{}, fmt.Errorf("efa: region key (%d bytes) is malformed: %s: %w", len(b), why, plugins.ErrProtocol)
	}
	if len(b) < keyHeader {
		return bad("too short")
	}
	if b[0] != keyVersion {
		return bad(fmt.Sprintf("version %d, this transport speaks %d", b[0], keyVersion))
	}
	k := regionKey{
		Flags: b[1],
		Key:   binary.LittleEndian.Uint64(b[4:]),
		Base:  binary.LittleEndian.Uint64(b[12:]),
		Size:  binary.LittleEndian.Uint64(b[20:]),
		Slot:  binary.LittleEndian.Uint32(b[28:]),
		Token: binary.LittleEndian.Uint64(b[32:]),
	}
	if k.Flags&^(keyFlagVirtAddr|keyFlagRaw) != 0 {
		return bad(fmt.Sprintf("unknown flags 0x%x", k.Flags))
	}
	raw := int(binary.LittleEndian.Uint16(b[2:]))
	if raw > maxRawKey || len(b) != keyHeader+raw {
		return bad(fmt.Sprintf("raw key length %d with %d bytes left", raw, len(b)-keyHeader))
	}
	if (raw > 0) != (k.Flags&keyFlagRaw != 0) {
		return bad("raw key flag and length disagree")
	}
	if k.Size == 0 {
		return bad("empty region")
	}
	if k.Base+k.Size < k.Base {
		return bad("region wraps the address space")
	}
	if raw > 0 {
		k.Raw = append([]byte(nil), b[keyHeader:]...)
	}
	return k, nil
}
