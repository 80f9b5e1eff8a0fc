package connector_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/kvconnect/kvconnect/auth"
	"github.com/kvconnect/kvconnect/connector"
	"github.com/kvconnect/kvconnect/internal/testbin"
	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/transports/tcp"
)

const (
	nodeSecret  = "connector-test-secret-0123456789"
	otherSecret = "another-test-secret-9876543210"
)

// authNode starts a tcp node with secret ("" = auth off). Its logs go to
// the test log and to the returned observer.
func authNode(t *testing.T, secret string, opts ...connector.Option) (*connector.Connector, *observer.ObservedLogs) {
	t.Helper()
	core, logs := observer.New(zapcore.DebugLevel)
	log := zap.New(zapcore.NewTee(core, zaptest.NewLogger(t).Core()))
	cfg := connector.Config{Protocol: "tcp", PluginDir: pluginDir(t), AuthSecret: auth.Secret(secret), ConnectTimeout: 5 * time.Second}
	c, err := connector.New(context.Background(), cfg, append([]connector.Option{connector.WithLogger(log)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, logs
}

// noSecretLogged fails the test if any log line shows a secret.
func noSecretLogged(t *testing.T, logs ...*observer.ObservedLogs) {
	t.Helper()
	for _, l := range logs {
		for _, e := range l.All() {
			b, _ := json.Marshal(e.ContextMap())
			line := e.Message + " " + string(b)
			for _, s := range []string{nodeSecret, otherSecret} {
				if strings.Contains(line, s) {
					t.Errorf("a log line shows a secret: %s", line)
				}
			}
		}
	}
}

// dataEndpoint is the node's tcp data port, from its Status.
func dataEndpoint(t *testing.T, c *connector.Connector) string {
	t.Helper()
	for _, ts := range c.Status().Transports {
		if ts.Name == "tcp" {
			return strings.TrimPrefix(ts.Summary, "tcp ")
		}
	}
	t.Fatal("no tcp transport up")
	return ""
}

// TestAuthenticatedNodes: nodes holding the secret, as plugins and
// in-process, move data and notifications; Status says auth is on; no log
// line shows the secret.
func TestAuthenticatedNodes(t *testing.T) {
	ctx := context.Background()
	a, la := authNode(t, nodeSecret)
	b, lb := authNode(t, nodeSecret)
	c, lc := authNode(t, nodeSecret, connector.WithInProcess("tcp"))
	if st := a.Status(); !strings.HasPrefix(st.Auth, "auth on") || !st.Transports[0].Authenticates || st.Mode != "plugin" {
		t.Fatalf("status: auth %q, transports %+v", st.Auth, st.Transports)
	}
	if st := c.Status(); st.Mode != "in-process" || !st.Transports[0].Authenticates {
		t.Fatalf("in-process node status: %+v", st)
	}
	dst := alloc(t, b, 1<<20)
	for _, from := range []*connector.Connector{a, c} {
		src := alloc(t, from, 1<<20)
		fill(src.Bytes(), byte(len(from.SessionID())))
		if err := from.TransferSyncWrite(ctx, b.SessionID(), src.Addr(), dst.Addr(), 1<<20); err != nil {
			t.Fatalf("%s -> %s: %v", from.Status().Mode, b.SessionID(), err)
		}
		if !bytes.Equal(dst.Bytes(), src.Bytes()) {
			t.Fatalf("%s write did not land", from.Status().Mode)
		}
	}
	if err := a.Notify(ctx, b.SessionID(), "hello", "authenticated"); err != nil {
		t.Fatalf("notify: %v", err)
	}
	select {
	case n := <-b.Notifications():
		if n.Msg != "authenticated" {
			t.Fatalf("notification %+v", n)
		}
	case <-time.After(testbin.WaitLimit):
		t.Fatal("no notification")
	}
	noSecretLogged(t, la, lb, lc)
}

func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = seed + byte(i*7)
	}
}

// TestUnauthenticatedPeersRefused: a node with another secret, or none,
// cannot open the node, and one that goes straight to its data port with
// the region's address cannot touch its memory; a node with the secret
// will not talk to a node without one.
func TestUnauthenticatedPeersRefused(t *testing.T) {
	ctx := context.Background()
	target, lt := authNode(t, nodeSecret)
	dst := alloc(t, target, 1<<20)
	fill(dst.Bytes(), 1)
	before := bytes.Clone(dst.Bytes())

	for _, tc := range []struct {
		name, secret, says string
	}{
		{"another secret", otherSecret, "the peer holds no secret with this key id"},
		{"no secret", "", "requires authentication"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stranger, ls := authNode(t, tc.secret)
			_, err := stranger.Open(ctx, target.SessionID())
			if !errors.Is(err, connector.ErrUnauthenticated) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("Open: %v, want ErrUnauthenticated saying %q", err, tc.says)
			}
			noSecretLogged(t, ls)
		})
	}

	// Straight to the data port, knowing the region's address.
	attacker := tcp.New()
	if _, err := attacker.Init(ctx, plugins.InitRequest{Hostname: "127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	defer attacker.Close(ctx)
	payload := make([]byte, 4096)
	if _, err := attacker.RegisterRegion(ctx, plugins.Region{ID: 1, Addr: uint64(uintptr(unsafe.Pointer(&payload[0]))), Mem: payload}); err != nil {
		t.Fatal(err)
	}
	peer, err := attacker.Connect(ctx, plugins.PeerInfo{Name: "target", Endpoint: []byte(dataEndpoint(t, target))})
	if err == nil {
		res := make([]plugins.OpResult, 1)
		err = attacker.Transfer(ctx, peer, []plugins.Op{{Kind: plugins.OpWrite, LocalRegion: 1, RemoteOffset: dst.Addr(), Length: 4096}}, res)
		err = errors.Join(err, res[0].Err)
	}
	if err == nil {
		t.Fatal("a transport without the secret wrote to the data port")
	}
	t.Logf("data port refused: %v", err)
	if !bytes.Equal(dst.Bytes(), before) {
		t.Fatal("the target's memory changed")
	}

	// And the other way: a node with the secret refuses one without.
	open, _ := authNode(t, "")
	_, err = target.Open(ctx, open.SessionID())
	if !errors.Is(err, connector.ErrUnauthenticated) || !strings.Contains(err.Error(), "authentication off") {
		t.Fatalf("Open of a node without auth: %v, want ErrUnauthenticated saying it has authentication off", err)
	}
	noSecretLogged(t, lt)
}

// proxy forwards one connection at a time to target and records what
// clients sent.
type proxy struct {
	ln   net.Listener
	mu   sync.Mutex
	sent bytes.Buffer
	wg   sync.WaitGroup
}

func newProxy(t *testing.T, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			p.wg.Add(2)
			go func() { defer p.wg.Done(); io.Copy(out, io.TeeReader(in, p)); out.(*net.TCPConn).CloseWrite() }()
			go func() { defer p.wg.Done(); io.Copy(in, out); in.Close(); out.Close() }()
		}
	}()
	t.Cleanup(func() { ln.Close(); p.wg.Wait() })
	return p
}

func (p *proxy) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sent.Write(b)
}

func (p *proxy) recorded() []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	return bytes.Clone(p.sent.Bytes())
}

// TestReplayedHandshakeRefused: the bytes a node with the secret sent in
// a handshake, replayed to the RPC port, are refused after the proof: the
// replayer gets the challenge and a refusal, never a reply.
func TestReplayedHandshakeRefused(t *testing.T) {
	ctx := context.Background()
	a, _ := authNode(t, nodeSecret)
	b, lb := authNode(t, nodeSecret)
	alloc(t, b, 1<<20)
	px := newProxy(t, b.SessionID())
	// The descriptor names b's own session, not the proxy's: whether
	// this Open succeeds does not matter, only the bytes a sent.
	a.Open(ctx, px.ln.Addr().String())
	rec := px.recorded()
	if len(rec) <= auth.HelloSize+auth.ProofSize || !bytes.HasPrefix(rec, []byte(auth.Magic)) {
		t.Fatalf("recorded %d bytes (%q...), want an authenticated request", len(rec), rec[:min(len(rec), 8)])
	}
	nc, err := net.Dial("tcp", b.SessionID())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := nc.Write(rec); err != nil {
		t.Fatal(err)
	}
	reply, err := io.ReadAll(nc)
	if err != nil && !errors.Is(err, io.EOF) && !strings.Contains(err.Error(), "reset") {
		t.Fatal(err)
	}
	if len(reply) != auth.ChallengeSize+auth.VerdictSize || auth.Status(reply[len(reply)-1]) != auth.StatusBadProof {
		t.Fatalf("the replayer got %d bytes %s, want a challenge and a refusal only", len(reply), fmt.Sprintf("%q", reply[:min(len(reply), 80)]))
	}
	if !logged(lb, "refused a handshake connection that failed authentication") {
		t.Error("no log line for the refused replay")
	}
}

func logged(l *observer.ObservedLogs, msg string) bool {
	return l.FilterMessage(msg).Len() > 0
}
