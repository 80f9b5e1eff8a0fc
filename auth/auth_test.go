package auth_test

import (
	"bytes"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvconnect/kvconnect/auth"
	"github.com/kvconnect/kvconnect/errdefs"
)

const (
	secretA auth.Secret = "a-secret-of-enough-bytes-0000001"
	secretB auth.Secret = "b-secret-of-enough-bytes-0000002"
)

func ring(t testing.TB, s ...auth.Secret) *auth.Keyring {
	t.Helper()
	k, err := auth.NewKeyring(s...)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// pair returns the two ends of a loopback TCP connection, closed at the
// end of the test, each with a deadline so a stuck exchange fails.
func pair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server = <-accepted
	if server == nil {
		t.Fatal("accept failed")
	}
	for _, c := range []net.Conn{client, server} {
		c.SetDeadline(time.Now().Add(10 * time.Second))
		t.Cleanup(func() { c.Close() })
	}
	return client, server
}

// run runs one exchange; the server closes its end when it fails, as
// callers must.
func run(t *testing.T, client, server *auth.Keyring, cPurpose, sPurpose string) (cerr, serr error) {
	c, s := pair(t)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if serr = server.Accept(s, sPurpose); serr != nil {
			s.Close()
		}
	}()
	if cerr = client.Prove(c, cPurpose); cerr != nil {
		c.Close()
	}
	wg.Wait()
	return cerr, serr
}

func TestExchange(t *testing.T) {
	for _, tc := range []struct {
		name           string
		client, server *auth.Keyring
		cPurpose       string
		ok             bool
		clientSays     string
		serverSays     string
	}{
		{name: "same secret", client: ring(t, secretA), server: ring(t, secretA), ok: true},
		{name: "server accepts the client's old secret while rotating", client: ring(t, secretA), server: ring(t, secretB, secretA), ok: true},
		{name: "server accepts the client's new secret while rotating", client: ring(t, secretB), server: ring(t, secretA, secretB), ok: true},
		{name: "different secrets", client: ring(t, secretA), server: ring(t, secretB),
			clientSays: "holds no secret with this key id", serverSays: "does not hold"},
		{name: "purposes differ", client: ring(t, secretA), server: ring(t, secretA), cPurpose: "tcp-data",
			clientSays: "failed to prove", serverSays: "closed before the proof"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cp := tc.cPurpose
			if cp == "" {
				cp = "handshake"
			}
			cerr, serr := run(t, tc.client, tc.server, cp, "handshake")
			if tc.ok {
				if cerr != nil || serr != nil {
					t.Fatalf("client %v, server %v", cerr, serr)
				}
				return
			}
			if !errors.Is(cerr, errdefs.ErrUnauthenticated) || !strings.Contains(cerr.Error(), tc.clientSays) {
				t.Errorf("client: %v, want ErrUnauthenticated saying %q", cerr, tc.clientSays)
			}
			if serr == nil || !strings.Contains(serr.Error(), tc.serverSays) {
				t.Errorf("server: %v, want an error saying %q", serr, tc.serverSays)
			}
		})
	}
}

// recorder keeps what a client sent.
type recorder struct {
	net.Conn
	sent bytes.Buffer
}

func (r *recorder) Write(p []byte) (int, error) { r.sent.Write(p); return r.Conn.Write(p) }

// TestReplayRefused: the bytes of a good client, sent again to the
// server, do not authenticate: the server's nonce is new.
func TestReplayRefused(t *testing.T) {
	k := ring(t, secretA)
	c, s := pair(t)
	rec := &recorder{Conn: c}
	done := make(chan error, 1)
	go func() { done <- k.Accept(s, "handshake") }()
	if err := k.Prove(rec, "handshake"); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	c2, s2 := pair(t)
	go func() { done <- k.Accept(s2, "handshake") }()
	if _, err := c2.Write(rec.sent.Bytes()); err != nil {
		t.Fatal(err)
	}
	err := <-done
	if !errors.Is(err, errdefs.ErrUnauthenticated) || !strings.Contains(err.Error(), "replayed or forged") {
		t.Fatalf("replayed client: %v, want refused", err)
	}
	reply, _ := io.ReadAll(io.LimitReader(c2, auth.ChallengeSize+auth.VerdictSize))
	if n := len(reply); n != auth.ChallengeSize+auth.VerdictSize || auth.Status(reply[n-1]) != auth.StatusBadProof {
		t.Fatalf("the replayed client got %x, want a challenge then StatusBadProof", reply)
	}
}

// TestReplayedServerRefused: a fake server answering with a recorded
// challenge (and proof) is refused by the client: the client's nonce is new.
func TestReplayedServerRefused(t *testing.T) {
	k := ring(t, secretA)
	c, s := pair(t)
	rec := &recorder{Conn: s}
	done := make(chan error, 1)
	go func() { done <- k.Accept(rec, "handshake") }()
	if err := k.Prove(c, "handshake"); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	recorded := rec.sent.Bytes()[:auth.ChallengeSize]

	c2, s2 := pair(t)
	go func() {
		io.ReadFull(s2, make([]byte, auth.HelloSize))
		s2.Write(recorded)
	}()
	err := k.Prove(c2, "handshake")
	if !errors.Is(err, errdefs.ErrUnauthenticated) || !strings.Contains(err.Error(), "failed to prove") {
		t.Fatalf("client facing a replayed server: %v, want refused", err)
	}
}

func TestRefuseWhenOff(t *testing.T) {
	c, s := pair(t)
	go func() {
		first := make([]byte, len(auth.Magic))
		io.ReadFull(s, first)
		if auth.IsHello(first) {
			auth.Refuse(s)
		}
		s.Close()
	}()
	err := ring(t, secretA).Prove(c, "handshake")
	if !errors.Is(err, errdefs.ErrUnauthenticated) || !strings.Contains(err.Error(), "authentication off") {
		t.Fatalf("Prove against a node with auth off: %v", err)
	}
}

func TestClientThatDoesNotAuthenticate(t *testing.T) {
	c, s := pair(t)
	go c.Write([]byte("KVCN-some-data-frame"))
	err := ring(t, secretA).Accept(s, "tcp-data")
	if !errors.Is(err, errdefs.ErrUnauthenticated) || !strings.Contains(err.Error(), `"KVCN"`) {
		t.Fatalf("Accept of a client that does not authenticate: %v", err)
	}
}

func TestNewKeyringErrors(t *testing.T) {
	for _, tc := range []struct {
		secrets []auth.Secret
		says    string
	}{
		{nil, "at least one secret"},
		{[]auth.Secret{"short"}, "secret 1 of 1 is 5 bytes; at least 16"},
		{[]auth.Secret{secretA, secretA}, "secrets 1 and 2 are the same"},
	} {
		_, err := auth.NewKeyring(tc.secrets...)
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("NewKeyring(%d secrets): %v, want %q", len(tc.secrets), err, tc.says)
		}
	}
}

// TestSecretNeverPrinted: every way of printing a secret or a keyring
// hides the secret's bytes.
func TestSecretNeverPrinted(t *testing.T) {
	k := ring(t, secretA, secretB)
	for _, out := range []string{
		secretA.String(), secretA.GoString(),
		sprintf("%v %s %q %x %X %+v %#v %d", secretA, secretA, secretA, secretA, secretA, secretA, secretA, secretA),
		sprintf("%v %+v %#v %s", k, k, k, k),
		sprintf("%v", struct{ S auth.Secret }{secretA}),
		jsonOf(t, map[string]any{"s": secretA}),
	} {
		for _, s := range []string{string(secretA), string(secretB), hexOf(secretA)} {
			if strings.Contains(out, s) {
				t.Fatalf("%q shows a secret", out)
			}
		}
	}
}
