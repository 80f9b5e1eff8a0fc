package auth

import (
	"fmt"

	"github.com/kvconnect/kvconnect/errdefs"
)

// Keyring holds the secrets a node authenticates with: it proves itself
// with the first and accepts peers proving any of them. A Keyring is
// immutable and safe for concurrent use; a nil *Keyring means
// authentication is off.
type Keyring struct {
	secrets []Secret
	ids     []KeyID
}

// NewKeyring returns a keyring of secrets, the first one used to prove
// this node. Each must be at least MinSecretLen bytes, and none may repeat.
func NewKeyring(secrets ...Secret) (*Keyring, error) {
	if len(secrets) == 0 {
		return nil, fmt.Errorf("auth: a keyring needs at least one secret: %w", errdefs.ErrInvalidArgument)
	}
	k := &Keyring{}
	for i, s := range secrets {
		if len(s) < MinSecretLen {
			return nil, fmt.Errorf("auth: secret %d of %d is %d bytes; at least %d are needed (make one with: head -c 32 /dev/urandom | base64): %w",
				i+1, len(secrets), len(s), MinSecretLen, errdefs.ErrInvalidArgument)
		}
		id := keyID(s)
		for j, prev := range k.ids {
			if prev == id {
				return nil, fmt.Errorf("auth: secrets %d and %d are the same: %w", j+1, i+1, errdefs.ErrInvalidArgument)
			}
		}
		k.secrets = append(k.secrets, s)
		k.ids = append(k.ids, id)
	}
	return k, nil
}

// Len is the number of secrets (0 for a nil keyring).
func (k *Keyring) Len() int {
	if k == nil {
		return 0
	}
	return len(k.secrets)
}

// Secrets returns the secrets, the proving one first, for handing the
// keyring to a transport plugin. Callers must not log them.
func (k *Keyring) Secrets() []Secret {
	if k == nil {
		return nil
	}
	return append([]Secret(nil), k.secrets...)
}

// KeyID is the id of the secret this node proves itself with.
func (k *Keyring) KeyID() KeyID { return k.ids[0] }

// String describes the keyring without its secrets.
func (k *Keyring) String() string {
	if k == nil {
		return "auth off"
	}
	return fmt.Sprintf("auth on: proves with key %s, accepts %d key(s)", k.ids[0], len(k.ids))
}

// GoString is String.
func (k *Keyring) GoString() string { return k.String() }

func (k *Keyring) lookup(id KeyID) (Secret, bool) {
	for i, have := range k.ids {
		if have == id {
			return k.secrets[i], true
		}
	}
	return "", false
}
