package auth

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"

	"github.com/kvconnect/kvconnect/errdefs"
)

// The exchange runs over any io.ReadWriter; the caller bounds it (a
// deadline on the connection), since a peer may stop sending at any
// point. Errors wrap errdefs.ErrUnauthenticated when a side failed to
// prove itself or was refused, errdefs.ErrProtocol for a malformed
// message, and the I/O error otherwise.

func proof(s Secret, role, purpose string, client, server *[NonceSize]byte) [ProofSize]byte {
	m := hmac.New(sha256.New, []byte(s))
	m.Write([]byte(label + "\x00" + role + "\x00" + purpose + "\x00"))
	m.Write(client[:])
	m.Write(server[:])
	var p [ProofSize]byte
	copy(p[:], m.Sum(nil))
	return p
}

func readFull(r io.Reader, n int, what string) ([]byte, error) {
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("auth: the connection closed before the %s: %w", what, io.ErrUnexpectedEOF)
		}
		return nil, fmt.Errorf("auth: reading the %s: %w", what, err)
	}
	return b, nil
}

// Prove runs the client side: it proves that this side holds k's first
// secret and checks that the server proves the same. purpose names what
// the connection is for ("handshake", "tcp-data"); both sides must agree.
func (k *Keyring) Prove(rw io.ReadWriter, purpose string) error {
	h := Hello{Version: Version, Key: k.ids[0]}
	rand.Read(h.Nonce[:])
	if _, err := rw.Write(h.Encode()); err != nil {
		return fmt.Errorf("auth: sending the hello: %w", err)
	}
	b, err := readFull(rw, ChallengeSize, "challenge (is authentication on at the peer? a kvconnect node without auth_secret says so; a Mooncake node cannot authenticate)")
	if err != nil {
		return err
	}
	c, err := DecodeChallenge(b)
	if err != nil {
		return err
	}
	if c.Status != StatusOK {
		return fmt.Errorf("auth: the peer refused this node's key %s: %s: %w", h.Key, c.Status, errdefs.ErrUnauthenticated)
	}
	want := proof(k.secrets[0], "server", purpose, &h.Nonce, &c.Nonce)
	if !hmac.Equal(want[:], c.Proof[:]) {
		return fmt.Errorf("auth: the peer failed to prove it holds the secret of key %s: %w", h.Key, errdefs.ErrUnauthenticated)
	}
	p := proof(k.secrets[0], "client", purpose, &h.Nonce, &c.Nonce)
	if _, err := rw.Write(p[:]); err != nil {
		return fmt.Errorf("auth: sending the proof: %w", err)
	}
	v, err := readFull(rw, VerdictSize, "verdict")
	if err != nil {
		return err
	}
	if s := Status(v[0]); s != StatusOK {
		return fmt.Errorf("auth: the peer refused this node's proof: %s: %w", s, errdefs.ErrUnauthenticated)
	}
	return nil
}

// Accept runs the server side: it reads the client's hello (Magic
// included), proves this side holds the secret the client names, and
// checks the client's proof. On any failure it tells the client why
// (when the client got that far) and returns an error; the caller must
// then close the connection without reading anything more from it.
func (k *Keyring) Accept(rw io.ReadWriter, purpose string) error {
	b, err := readFull(rw, len(Magic), "hello")
	if err != nil {
		return err
	}
	if string(b) != Magic {
		_, err := DecodeHello(b)
		return err
	}
	rest, err := readFull(rw, HelloSize-len(Magic), "hello")
	if err != nil {
		return err
	}
	h, err := DecodeHello(append(b, rest...))
	if err != nil {
		return err
	}
	refuse := func(s Status, err error) error {
		c := Challenge{Status: s}
		rw.Write(c.Encode())
		return err
	}
	if h.Version != Version {
		return refuse(StatusBadVersion, fmt.Errorf("auth: the client speaks version %d, this node %d: %w", h.Version, Version, errdefs.ErrUnauthenticated))
	}
	s, ok := k.lookup(h.Key)
	if !ok {
		return refuse(StatusUnknownKey, fmt.Errorf("auth: the client proves with key %s, which this node does not hold (a different auth_secret): %w", h.Key, errdefs.ErrUnauthenticated))
	}
	c := Challenge{Status: StatusOK}
	rand.Read(c.Nonce[:])
	c.Proof = proof(s, "server", purpose, &h.Nonce, &c.Nonce)
	if _, err := rw.Write(c.Encode()); err != nil {
		return fmt.Errorf("auth: sending the challenge: %w", err)
	}
	got, err := readFull(rw, ProofSize, "proof")
	if err != nil {
		return err
	}
	want := proof(s, "client", purpose, &h.Nonce, &c.Nonce)
	if !hmac.Equal(want[:], got) {
		rw.Write([]byte{byte(StatusBadProof)})
		return fmt.Errorf("auth: the client's proof for key %s is wrong (a replayed or forged exchange): %w", h.Key, errdefs.ErrUnauthenticated)
	}
	if _, err := rw.Write([]byte{byte(StatusOK)}); err != nil {
		return fmt.Errorf("auth: sending the verdict: %w", err)
	}
	return nil
}

// Refuse answers a client's hello on a node that has authentication off:
// it reads the rest of the hello (the caller has read Magic) and says so,
// so the client's error is clear. The caller then closes the connection.
func Refuse(rw io.ReadWriter) error {
	if _, err := readFull(rw, HelloSize-len(Magic), "hello"); err != nil {
		return err
	}
	c := Challenge{Status: StatusNotEnabled}
	_, err := rw.Write(c.Encode())
	return err
}

// IsHello reports whether a connection's first bytes open an
// authentication exchange.
func IsHello(first []byte) bool { return string(first) == Magic }

// Prefixed returns rw with prefix put back in front of what it reads, for
// a server that read a connection's first bytes to tell protocols apart.
func Prefixed(prefix []byte, rw io.ReadWriter) io.ReadWriter {
	return prefixed{io.MultiReader(bytes.NewReader(append([]byte(nil), prefix...)), rw), rw}
}

type prefixed struct {
	io.Reader
	io.Writer
}
