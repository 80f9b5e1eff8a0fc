package auth_test

import (
	"bytes"
	"io"
	"testing"

	"github.com/kvconnect/kvconnect/auth"
)

func FuzzDecodeHello(f *testing.F) {
	f.Add((&auth.Hello{Version: auth.Version}).Encode())
	f.Add([]byte("KVCN"))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := auth.DecodeHello(b)
		if err != nil {
			return
		}
		if !bytes.Equal(h.Encode(), b) {
			t.Fatalf("hello %x decodes to %+v, which encodes to %x", b, h, h.Encode())
		}
	})
}

func FuzzDecodeChallenge(f *testing.F) {
	f.Add((&auth.Challenge{}).Encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := auth.DecodeChallenge(b)
		if err != nil {
			return
		}
		if !bytes.Equal(c.Encode(), b) {
			t.Fatalf("challenge %x decodes to %+v, which encodes to %x", b, c, c.Encode())
		}
	})
}

// duplex feeds Accept the fuzzer's bytes and collects its answers.
type duplex struct {
	io.Reader
	out bytes.Buffer
}

func (d *duplex) Write(p []byte) (int, error) { return d.out.Write(p) }

// FuzzAccept: whatever a client sends, Accept never lets it through
// without the secret (and never panics).
func FuzzAccept(f *testing.F) {
	k, err := auth.NewKeyring(secretA)
	if err != nil {
		f.Fatal(err)
	}
	hello := (&auth.Hello{Version: auth.Version, Key: k.KeyID()}).Encode()
	f.Add(append(hello, make([]byte, auth.ProofSize)...))
	f.Add([]byte("KVCA"))
	f.Fuzz(func(t *testing.T, b []byte) {
		d := &duplex{Reader: bytes.NewReader(b)}
		if err := k.Accept(d, "tcp-data"); err == nil {
			t.Fatalf("Accept let %x through", b)
		}
	})
}
