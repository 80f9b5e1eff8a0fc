package transporttest

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/kvconnect/kvconnect/auth"
	"github.com/kvconnect/kvconnect/plugins"
)

// testAuthentication: with h.Auth, a node holding another secret, and one
// with authentication off, can neither write nor read the target's
// memory; a node holding the secret can.
func testAuthentication(t *testing.T, h Harness) {
	const size = 64 << 10
	target := NewNode(t, h, "target")
	if info, _ := target.T.Info(context.Background()); info.Capabilities&plugins.CapAuthenticates == 0 {
		t.Fatalf("Harness.Auth is set but %s does not report CapAuthenticates", info.Name)
	}
	dst := target.Alloc(t, size, 0)
	Fill(dst.Bytes, 11)
	before := bytes.Clone(dst.Bytes)

	other, err := auth.NewKeyring("another-secret-of-enough-bytes")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		auth *auth.Keyring
	}{{"another secret", other}, {"no secret", nil}} {
		t.Run(tc.name, func(t *testing.T) {
			sh := h
			sh.Auth = tc.auth
			stranger := NewNode(t, sh, "stranger")
			src := stranger.Alloc(t, size, 0)
			Fill(src.Bytes, 12)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			id, err := stranger.T.Connect(ctx, target.Info())
			if err == nil {
				// A transport may connect lazily: then the ops must fail.
				res, berr := stranger.Transfer(t, id, []plugins.Op{
					{Kind: plugins.OpWrite, LocalRegion: src.ID, RemoteRegion: dst.ID, Length: size},
					{Kind: plugins.OpRead, LocalRegion: src.ID, RemoteRegion: dst.ID, Length: size},
				})
				if berr == nil && (res[0].Err == nil || res[1].Err == nil) {
					t.Fatalf("a node with %s moved data: %v %v", tc.name, res[0].Err, res[1].Err)
				}
				err = errors.Join(berr, res[0].Err, res[1].Err)
			}
			if tc.auth != nil && !errors.Is(err, plugins.ErrUnauthenticated) {
				t.Errorf("a node with another secret: %v, want ErrUnauthenticated", err)
			}
			t.Logf("refused: %v", err)
			equal(t, "the target's memory after a stranger's attempt", dst.Bytes, before)
		})
	}

	// A node holding the secret still gets through.
	friend := NewNode(t, h, "friend")
	src := friend.Alloc(t, size, 0)
	Fill(src.Bytes, 13)
	peer := friend.Connect(t, target)
	friend.MustTransfer(t, peer, []plugins.Op{{Kind: plugins.OpWrite, LocalRegion: src.ID, RemoteRegion: dst.ID, Length: size}})
	equal(t, "a write by a node holding the secret", dst.Bytes, src.Bytes)

	// And it will not talk to a node that cannot prove itself.
	sh := h
	sh.Auth = nil
	open := NewNode(t, sh, "no-auth-target")
	odst := open.Alloc(t, size, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	id, err := friend.T.Connect(ctx, open.Info())
	if err == nil {
		res, berr := friend.Transfer(t, id, []plugins.Op{{Kind: plugins.OpWrite, LocalRegion: src.ID, RemoteRegion: odst.ID, Length: size}})
		err = errors.Join(berr, res[0].Err)
		if err == nil {
			t.Fatal("a node with auth on wrote to a node with auth off")
		}
	}
	if !errors.Is(err, plugins.ErrUnauthenticated) {
		t.Errorf("a node with auth on, to a node with auth off: %v, want ErrUnauthenticated", err)
	}
}
