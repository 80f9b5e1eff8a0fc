// Package auth is kvconnect's peer authentication: a mutual
// challenge-response over a shared secret, run at the start of a
// connection before anything else is read from it.
//
// A node with a Keyring proves on every connection it opens (the
// handshake to a peer's RPC port, each data connection of the tcp
// transport) that it holds the keyring's first secret, and requires the
// same of every connection it accepts, with any of the keyring's secrets
// (so a secret can be rotated without downtime; see docs/SECURITY.md).
// Both sides prove themselves: a node never talks to a peer that cannot.
//
// The exchange (version 1), all sizes fixed:
//
//	client -> server  hello      "KVCA" | version u8 | key id [8] | client nonce [32]
//	server -> client  challenge  status u8 | server nonce [32] | server proof [32]
//	client -> server  proof      client proof [32]
//	server -> client  verdict    status u8
//
// where, with K the secret the key id names and HMAC = HMAC-SHA256,
//
//	key id       = HMAC(K, "kvconnect-auth-v1\x00key-id")[:8]
//	server proof = HMAC(K, "kvconnect-auth-v1\x00server\x00" purpose "\x00" client nonce | server nonce)
//	client proof = HMAC(K, "kvconnect-auth-v1\x00client\x00" purpose "\x00" client nonce | server nonce)
//
// The secret never crosses the wire. Both nonces are fresh random bytes,
// so a recorded exchange replayed to either side fails; the role and the
// purpose (which port the connection is for) are bound into each proof,
// so one side's proof cannot be reflected back or reused on another port.
//
// What it does not do: encrypt or integrity-protect the traffic that
// follows. Someone who can read and rewrite packets on the path can take
// over an authenticated connection; see docs/SECURITY.md.
package auth
