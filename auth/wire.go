package auth

import (
	"bytes"
	"fmt"
	"time"

	"github.com/kvconnect/kvconnect/errdefs"
)

// Magic opens every authenticated connection. It cannot start a kvconnect
// data frame ("KVCN") or a sane Mooncake frame, so a server can tell at
// its first four bytes whether a client authenticates.
const Magic = "KVCA"

// Version is the exchange's version.
const Version = 1

const label = "kvconnect-auth-v1"

// Purposes kvconnect's own connections use; a third-party transport names
// its own ("<transport>-data").
const (
	PurposeHandshake = "handshake" // the RPC (handshake) port
	PurposeTCPData   = "tcp-data"  // the tcp transport's data connections
)

// Timeout is a sane bound for the whole exchange.
const Timeout = 5 * time.Second

// Sizes of the exchange's messages.
const (
	NonceSize     = 32
	ProofSize     = 32
	HelloSize     = len(Magic) + 1 + len(KeyID{}) + NonceSize
	ChallengeSize = 1 + NonceSize + ProofSize
	VerdictSize   = 1
)

// Status is the server's answer in a challenge or verdict.
type Status byte

const (
	StatusOK          Status = 0 // go on
	StatusBadVersion  Status = 1 // the server does not speak this version
	StatusUnknownKey  Status = 2 // the server holds no secret with this key id
	StatusBadProof    Status = 3 // the client's proof is wrong
	StatusNotEnabled  Status = 4 // the server has no secret: authentication is off there
	StatusBadHello    Status = 5 // the hello was malformed
	statusLastDefined        = StatusBadHello
)

func (s Status) String() string {
	switch s {
	case StatusOK:
		return "ok"
	case StatusBadVersion:
		return "version not supported"
	case StatusUnknownKey:
		return "the peer holds no secret with this key id (a different auth_secret)"
	case StatusBadProof:
		return "the proof was wrong"
	case StatusNotEnabled:
		return "the peer has authentication off (no auth_secret set)"
	case StatusBadHello:
		return "the hello was malformed"
	}
	return fmt.Sprintf("status %d", byte(s))
}

// Hello is the client's first message.
type Hello struct {
	Version byte
	Key     KeyID
	Nonce   [NonceSize]byte
}

// Encode returns the hello's HelloSize bytes.
func (h *Hello) Encode() []byte {
	b := make([]byte, 0, HelloSize)
	b = append(b, Magic...)
	b = append(b, h.Version)
	b = append(b, h.Key[:]...)
	return append(b, h.Nonce[:]...)
}

// DecodeHello parses a hello. A wrong magic is ErrUnauthenticated (the
// client does not authenticate); a wrong length ErrProtocol. The version
// is returned as sent: the caller checks it.
func DecodeHello(b []byte) (Hello, error) {
	var h Hello
	if len(b) >= len(Magic) && !bytes.Equal(b[:len(Magic)], []byte(Magic)) {
		return h, fmt.Errorf("auth: the client did not authenticate (its first bytes are %q, not %q): %w", b[:len(Magic)], Magic, errdefs.ErrUnauthenticated)
	}
	if len(b) != HelloSize {
		return h, fmt.Errorf("auth: hello of %d bytes, want %d: %w", len(b), HelloSize, errdefs.ErrProtocol)
	}
	p := b[len(Magic):]
	h.Version = p[0]
	p = p[1:]
	copy(h.Key[:], p)
	copy(h.Nonce[:], p[len(h.Key):])
	return h, nil
}

// Challenge is the server's answer to a hello.
type Challenge struct {
	Status Status
	Nonce  [NonceSize]byte
	Proof  [ProofSize]byte
}

// Encode returns the challenge's ChallengeSize bytes.
func (c *Challenge) Encode() []byte {
	b := make([]byte, 0, ChallengeSize)
	b = append(b, byte(c.Status))
	b = append(b, c.Nonce[:]...)
	return append(b, c.Proof[:]...)
}

// DecodeChallenge parses a challenge.
func DecodeChallenge(b []byte) (Challenge, error) {
	var c Challenge
	if len(b) != ChallengeSize {
		return c, fmt.Errorf("auth: challenge of %d bytes, want %d: %w", len(b), ChallengeSize, errdefs.ErrProtocol)
	}
	c.Status = Status(b[0])
	if c.Status > statusLastDefined {
		return c, fmt.Errorf("auth: challenge with unknown status %d: %w", b[0], errdefs.ErrProtocol)
	}
	copy(c.Nonce[:], b[1:])
	copy(c.Proof[:], b[1+NonceSize:])
	return c, nil
}
