package connector

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
)

// The P2P handshake runs on the connector's RPC port, framed as Mooncake
// frames it: a u64 little-endian length (covering the type byte and the
// JSON body), a u8 type, then JSON. One request and one reply per
// connection; a good reply has the request's type, as Mooncake's clients
// require. kvconnect's requests carry a "kvconnect" member in their body;
// only they get an error frame when something is wrong.
const (
	frameConnect  byte = 0    // Mooncake's RDMA connection (QP) handshake
	frameMetadata byte = 1    // the segment descriptor
	frameNotify   byte = 2    // a notification for the receiver's Notifications
	frameProbe    byte = 3    // is the node alive
	frameError    byte = 0xFF // reply to a kvconnect request: {"error": "...", "kind": "..."}
)

// writeFrame writes one frame: the header and the body in one writev,
// without copying the body (a descriptor can be megabytes).
func writeFrame(w io.Writer, typ byte, body []byte) error {
	var hdr [9]byte
	binary.LittleEndian.PutUint64(hdr[:], uint64(1+len(body)))
	hdr[8] = typ
	bufs := net.Buffers{hdr[:], body}
	_, err := bufs.WriteTo(w)
	return err
}

// decodeFrameHeader validates the 9-byte frame header and returns the body
// length.
func decodeFrameHeader(hdr []byte, max int) (int, error) {
	if len(hdr) < 9 {
		return 0, fmt.Errorf("connector: handshake frame header of %d bytes: %w", len(hdr), ErrProtocol)
	}
	n := binary.LittleEndian.Uint64(hdr)
	if n == 0 {
		return 0, fmt.Errorf("connector: handshake frame of length 0: %w", ErrProtocol)
	}
	if n > uint64(max) {
		return 0, fmt.Errorf("connector: handshake frame of %d bytes exceeds max_handshake_frame %d: %w", n, max, ErrProtocol)
	}
	return int(n - 1), nil
}

// kvconnectMark is what a kvconnect node puts in its requests' bodies.
type kvconnectMark struct {
	Version int    `json:"version"`
	Session string `json:"session,omitempty"` // the sender's session id
}

// requestBody is what the server reads of any request body: the kvconnect
// mark, and the fields of a Mooncake notify.
type requestBody struct {
	KVConnect *kvconnectMark `json:"kvconnect,omitempty"`
	// Notify, as Mooncake sends it.
	Name      string `json:"name,omitempty"`
	NotifyMsg string `json:"notify_msg,omitempty"`
}

type errorReply struct {
	Error string `json:"error"`
	Kind  string `json:"kind,omitempty"`
}

// notifyReply is Mooncake's answer to a notify: a non-empty notify_msg
// means delivered.
type notifyReply struct {
	Name      string `json:"name"`
	NotifyMsg string `json:"notify_msg"`
}

// probeReply answers a probe, as Mooncake does, with the node's name.
type probeReply struct {
	Status string `json:"status"`
	Name   string `json:"name,omitempty"`
	Time   string `json:"time,omitempty"`
}

// connectReply answers Mooncake's RDMA connection handshake: a non-empty
// reply_msg makes the Mooncake peer log "Handshake rejected by <node>:
// <reply_msg>" and give up.
type connectReply struct {
	LocalNICPath string `json:"local_nic_path"`
	PeerNICPath  string `json:"peer_nic_path"`
	QPNum        []int  `json:"qp_num"`
	ReplyMsg     string `json:"reply_msg"`
}

// marshal encodes a handshake message of a fixed shape (which cannot fail).
func marshal(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}
