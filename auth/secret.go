package auth

import (
	"crypto/hmac"
	"crypto/sha256"
	"fmt"
	"io"
)

// MinSecretLen is the shortest secret accepted, in bytes. The exchange is
// on the wire in the clear, so an eavesdropper can guess secrets offline:
// use a random one (head -c 32 /dev/urandom | base64).
const MinSecretLen = 16

// Secret is a shared secret. Printing it (fmt's verbs, String, GoString,
// JSON, text encodings, zap) shows "<redacted>", never its bytes.
type Secret string

const redacted = "<redacted>"

// String returns "<redacted>".
func (Secret) String() string { return redacted }

// GoString returns "<redacted>".
func (Secret) GoString() string { return redacted }

// Format writes "<redacted>" for every verb.
func (Secret) Format(f fmt.State, _ rune) { io.WriteString(f, redacted) }

// MarshalText returns "<redacted>".
func (Secret) MarshalText() ([]byte, error) { return []byte(redacted), nil }

// MarshalJSON returns "<redacted>" as a JSON string.
func (Secret) MarshalJSON() ([]byte, error) { return []byte(`"` + redacted + `"`), nil }

// A KeyID names a secret on the wire without revealing it.
type KeyID [8]byte

func keyID(s Secret) KeyID {
	m := hmac.New(sha256.New, []byte(s))
	m.Write([]byte(label + "\x00key-id"))
	var id KeyID
	copy(id[:], m.Sum(nil))
	return id
}

// String formats the id in hex.
func (id KeyID) String() string { return fmt.Sprintf("%x", id[:]) }
