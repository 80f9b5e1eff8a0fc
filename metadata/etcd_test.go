package metadata

import (
	"context"
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kvconnect/kvconnect/errdefs"
	"github.com/kvconnect/kvconnect/internal/testbin"
	"github.com/kvconnect/kvconnect/internal/testservers"
)

func etcdGet(t *testing.T, cli *clientv3.Client, key string) (string, bool) {
	t.Helper()
	resp, err := cli.Get(ctxT(t), key)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	if len(resp.Kvs) == 0 {
		return "", false
	}
	return string(resp.Kvs[0].Value), true
}

// TestEtcdPublishResolve: a node publishes; another resolves it by name
// with no etcd read per resolve; the keys are Mooncake's, under a lease.
func TestEtcdPublishResolve(t *testing.T) {
	noLeaks(t)
	e := testservers.StartEtcd(t, testservers.EtcdOptions{})
	cli := e.Client(t)
	a := openT(t, Options{URL: e.URL(), TTL: 2 * time.Second})
	d := descriptor("10.0.0.1:15001", 1)
	if err := a.Publish(ctxT(t), "10.0.0.1:15001", d, RPCLocation{Host: "10.0.0.1", Port: 15001}); err != nil {
		t.Fatal(err)
	}
	// The keys and values exactly as Mooncake reads them.
	if v, ok := etcdGet(t, cli, "mooncake/ram/10.0.0.1:15001"); !ok || v != string(d) {
		t.Errorf("mooncake/ram/10.0.0.1:15001 = %q, %v", v, ok)
	}
	if v, ok := etcdGet(t, cli, "mooncake/rpc_meta/10.0.0.1:15001"); !ok || v != `{"ip_or_host_name":"10.0.0.1","rpc_port":15001}` {
		t.Errorf("rpc_meta = %q, %v", v, ok)
	}
	st := a.Status()
	ttl, err := cli.TimeToLive(ctxT(t), clientv3.LeaseID(st.LeaseID), clientv3.WithAttachedKeys())
	if err != nil || len(ttl.Keys) != 2 || ttl.GrantedTTL != 2 {
		t.Errorf("lease %x: %+v, %v; want both keys under a 2 s lease", st.LeaseID, ttl, err)
	}
	if !st.Connected || st.Publishes != 1 || len(st.Published) != 1 || st.Backend != Etcd {
		t.Errorf("status %+v", st)
	}

	b := openT(t, Options{URL: e.URL()})
	got, err := b.Resolve(ctxT(t), "10.0.0.1:15001")
	if err != nil || string(got) != string(d) {
		t.Fatalf("Resolve = %s, %v", got, err)
	}
	loc, err := b.ResolveRPC(ctxT(t), "10.0.0.1:15001")
	if err != nil || loc != (RPCLocation{Host: "10.0.0.1", Port: 15001}) {
		t.Errorf("ResolveRPC = %+v, %v", loc, err)
	}
	before := e.RangeRequests(t)
	for range 100 {
		if _, err := b.Resolve(ctxT(t), "10.0.0.1:15001"); err != nil {
			t.Fatal(err)
		}
	}
	if after := e.RangeRequests(t); after != before {
		t.Errorf("100 cached resolves made %v etcd reads, want 0", after-before)
	}
	if bs := b.Status(); bs.CacheHits != 100 || bs.Resolves != 102 || bs.ResolveErrors != 0 || bs.ResolveLatency.Count != 102 || bs.Cached != 2 {
		t.Errorf("resolver status %+v", bs.Counters)
	}

	// The descriptor changes (regions): the resolver sees the new one.
	d2 := descriptor("10.0.0.1:15001", 2)
	if err := a.Publish(ctxT(t), "10.0.0.1:15001", d2, RPCLocation{Host: "10.0.0.1", Port: 15001}); err != nil {
		t.Fatal(err)
	}
	testbin.Eventually(t, "resolver sees the new descriptor", func() bool {
		got, err := b.Resolve(ctxT(t), "10.0.0.1:15001")
		return err == nil && string(got) == string(d2)
	})

	_, err = b.Resolve(ctxT(t), "10.0.0.9:1")
	if !errors.Is(err, errdefs.ErrUnknownPeer) || !strings.Contains(err.Error(), "mooncake/ram/10.0.0.9:1") {
		t.Errorf("missing segment: %v, want ErrUnknownPeer naming the key", err)
	}
}

// TestEtcdPublishedAfterOpen: a segment published after the resolver
// opened is resolved at once (read from etcd if the watch has not
// delivered it yet), then from the cache.
func TestEtcdPublishedAfterOpen(t *testing.T) {
	e := testservers.StartEtcd(t, testservers.EtcdOptions{})
	b := openT(t, Options{URL: e.URL(), ClusterID: "c1"})
	a := openT(t, Options{URL: e.URL(), ClusterID: "c1"})
	for i, seg := range []string{"n1", "n2", "n3"} {
		if err := a.Publish(ctxT(t), seg, descriptor(seg, 1), rpcOf(15000+i)); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Resolve(ctxT(t), seg); err != nil {
			t.Errorf("resolve %s right after its publish: %v", seg, err)
		}
	}
	other := openT(t, Options{URL: e.URL(), ClusterID: "c2"})
	if _, err := other.Resolve(ctxT(t), "n1"); !errors.Is(err, errdefs.ErrUnknownPeer) || !strings.Contains(err.Error(), "mooncake/c2/ram/n1") {
		t.Errorf("another cluster resolved n1: %v", err)
	}
}

// TestEtcdClose: Close revokes the lease, so the keys go at once and
// resolvers' Gone fires; calls after Close fail; Close is idempotent.
func TestEtcdClose(t *testing.T) {
	noLeaks(t)
	e := testservers.StartEtcd(t, testservers.EtcdOptions{})
	cli := e.Client(t)
	a, err := Open(ctxT(t), Options{URL: e.URL(), TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Publish(ctxT(t), "node-a", descriptor("node-a", 1), rpcOf(15001)); err != nil {
		t.Fatal(err)
	}
	b := openT(t, Options{URL: e.URL()})
	if _, err := b.Resolve(ctxT(t), "node-a"); err != nil {
		t.Fatal(err)
	}
	gone := b.Gone("node-a")
	if err := a.Close(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"mooncake/ram/node-a", "mooncake/rpc_meta/node-a"} {
		if _, ok := etcdGet(t, cli, k); ok {
			t.Errorf("%s still there right after Close", k)
		}
	}
	testbin.WaitClosed(t, gone, "Gone after the peer closed")
	if _, err := b.Resolve(ctxT(t), "node-a"); !errors.Is(err, errdefs.ErrUnknownPeer) {
		t.Errorf("resolve after the peer closed: %v", err)
	}
	if b.Status().Gone != 1 {
		t.Errorf("Gone counter %d", b.Status().Gone)
	}
	select {
	case <-b.Gone("never-seen"):
	default:
		t.Error("Gone of an unknown segment is not closed")
	}
	if err := a.Close(ctxT(t)); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := a.Publish(ctxT(t), "x", descriptor("x", 1), rpcOf(1)); !errors.Is(err, errdefs.ErrClosed) {
		t.Errorf("Publish after Close: %v", err)
	}
	if _, err := a.Resolve(ctxT(t), "x"); !errors.Is(err, errdefs.ErrClosed) {
		t.Errorf("Resolve after Close: %v", err)
	}
}

// TestEtcdNodeKilled: a node killed with SIGKILL (no Close) vanishes when
// its lease expires, and resolvers' Gone fires.
func TestEtcdNodeKilled(t *testing.T) {
	e := testservers.StartEtcd(t, testservers.EtcdOptions{})
	cli := e.Client(t)
	b := openT(t, Options{URL: e.URL()})
	node := startNode(t, e.URL(), "", "victim")
	if _, err := b.Resolve(ctxT(t), "victim"); err != nil {
		t.Fatal(err)
	}
	gone := b.Gone("victim")
	node.renewed(t, 2) // the lease is renewed while the node lives
	if _, ok := etcdGet(t, cli, "mooncake/ram/victim"); !ok {
		t.Fatal("the key vanished while its node was alive")
	}
	node.Process.Signal(syscall.SIGKILL)
	node.Wait()
	// The lease expires helperTTL after the last renewal (etcd checks
	// expiry every 500 ms).
	took := testbin.WaitClosed(t, gone, "Gone after kill -9")
	for _, k := range []string{"mooncake/ram/victim", "mooncake/rpc_meta/victim"} {
		if _, ok := etcdGet(t, cli, k); ok {
			t.Errorf("%s outlived its node", k)
		}
	}
	t.Logf("keys gone %s after kill -9 (TTL %v)", took.Round(time.Millisecond), helperTTL)
}

// TestEtcdRestart: etcd stopped and started again (same data): the node
// shows the outage in Status and logs it once, resolvers keep answering
// from the cache, a publish during the outage is written once etcd is
// back, and the lease is renewed again.
func TestEtcdRestart(t *testing.T) {
	noLeaks(t)
	e := testservers.StartEtcd(t, testservers.EtcdOptions{})
	log, logs := observed()
	a := openT(t, Options{URL: e.URL(), TTL: 2 * time.Second, ConnectTimeout: 500 * time.Millisecond, Log: log})
	if err := a.Publish(ctxT(t), "node-a", descriptor("node-a", 1), rpcOf(15001)); err != nil {
		t.Fatal(err)
	}
	b := openT(t, Options{URL: e.URL(), TTL: 2 * time.Second, ConnectTimeout: 500 * time.Millisecond})
	if _, err := b.Resolve(ctxT(t), "node-a"); err != nil {
		t.Fatal(err)
	}
	e.Stop()
	testbin.Eventually(t, "the node notices the outage", func() bool { return !a.Status().Connected })
	st := a.Status()
	if st.LostSince.IsZero() || st.LastError == "" || st.Outages != 1 {
		t.Errorf("status during the outage: %+v", st)
	}
	if _, err := b.Resolve(ctxT(t), "node-a"); err != nil {
		t.Errorf("cached resolve during the outage: %v", err)
	}
	testbin.Eventually(t, "the resolver notices the outage", func() bool { return !b.Status().Connected })
	// Known lost, the service is not asked: the answer comes even for a
	// caller whose context has ended (asking would fail with ErrCanceled).
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := b.Resolve(ended, "node-x")
	if !errors.Is(err, errdefs.ErrPeerUnreachable) || !strings.Contains(err.Error(), e.Endpoint) {
		t.Errorf("uncached resolve during the outage: %v, want ErrPeerUnreachable naming %s without asking etcd", err, e.Endpoint)
	}
	err = a.Publish(ctxT(t), "node-a", descriptor("node-a", 2), rpcOf(15001))
	if !errors.Is(err, errdefs.ErrPeerUnreachable) {
		t.Errorf("publish during the outage: %v", err)
	}
	time.Sleep(time.Second) // several failed retries: still one log line
	e.Start()
	testbin.Eventually(t, "the node reconnects", func() bool { return a.Status().Connected })
	cli := e.Client(t)
	testbin.Eventually(t, "the publish made during the outage is written", func() bool {
		v, ok := etcdGet(t, cli, "mooncake/ram/node-a")
		return ok && v == string(descriptor("node-a", 2))
	})
	renewals := a.Status().Renewals
	testbin.Eventually(t, "the lease is renewed again", func() bool { return a.Status().Renewals > renewals })
	testbin.Eventually(t, "the resolver sees the new descriptor", func() bool {
		got, err := b.Resolve(ctxT(t), "node-a")
		return err == nil && string(got) == string(descriptor("node-a", 2))
	})
	if n := logs.FilterMessageSnippet("metadata service lost").Len(); n != 1 {
		t.Errorf("%d 'lost' log lines, want 1", n)
	}
	if n := logs.FilterMessageSnippet("metadata service is back").Len(); n != 1 {
		t.Errorf("%d 'back' log lines, want 1", n)
	}
}

// TestEtcdCloseWhileLost: a node whose etcd is gone closes after one try
// bounded as a renewal (TTL/3), not after ConnectTimeout (an hour here:
// a Close that waited on it would end the test at WaitLimit), and says
// its keys expire within TTL.
func TestEtcdCloseWhileLost(t *testing.T) {
	noLeaks(t)
	e := testservers.StartEtcd(t, testservers.EtcdOptions{})
	a, err := Open(ctxT(t), Options{URL: e.URL(), TTL: 3 * time.Second, ConnectTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Publish(ctxT(t), "node-a", descriptor("node-a", 1), rpcOf(15001)); err != nil {
		t.Fatal(err)
	}
	e.Stop()
	testbin.Eventually(t, "the node notices the outage", func() bool { return !a.Status().Connected })
	closed := make(chan error, 1)
	go func() { closed <- a.Close(context.Background()) }()
	select {
	case err := <-closed:
		if !errors.Is(err, errdefs.ErrPeerUnreachable) || !strings.Contains(err.Error(), "expire within 3s") {
			t.Errorf("Close with etcd gone: %v, want ErrPeerUnreachable saying the keys expire within 3s", err)
		}
	case <-time.After(testbin.WaitLimit):
		t.Fatal("Close waited on an etcd known to be gone")
	}
}

// TestEtcdLeaseLost: when etcd no longer knows the node's lease (revoked
// here by an operator; expired during a long partition in the field), the
// node grants a new one and publishes again on its own.
func TestEtcdLeaseLost(t *testing.T) {
	e := testservers.StartEtcd(t, testservers.EtcdOptions{})
	cli := e.Client(t)
	// A TTL no loaded machine outlasts, so the lease is lost only by the
	// revocation (a 1 s TTL used to expire the new lease too, under load,
	// and count a second republish); the supervisor's round that finds it
	// lost is woken instead of waited for (every TTL/3).
	a := openT(t, Options{URL: e.URL(), TTL: time.Minute})
	if err := a.Publish(ctxT(t), "node-a", descriptor("node-a", 1), rpcOf(15001)); err != nil {
		t.Fatal(err)
	}
	b := openT(t, Options{URL: e.URL()})
	if _, err := b.Resolve(ctxT(t), "node-a"); err != nil {
		t.Fatal(err)
	}
	gone := b.Gone("node-a")
	old := a.Status().LeaseID
	if _, err := cli.Revoke(ctxT(t), clientv3.LeaseID(old)); err != nil {
		t.Fatal(err)
	}
	testbin.WaitClosed(t, gone, "Gone when the lease was revoked")
	a.(*etcdService).wake()
	// Counted once the keys are in etcd: wait for the count, then look.
	testbin.Eventually(t, "republished under a new lease", func() bool { return a.Status().Republishes > 0 })
	if _, ok := etcdGet(t, cli, "mooncake/ram/node-a"); !ok {
		t.Error("republished, but the key is not in etcd")
	}
	st := a.Status()
	if st.LeaseID == old || st.Republishes != 1 {
		t.Errorf("status %+v, want a new lease and one republish", st)
	}
	testbin.Eventually(t, "resolvable again", func() bool { _, err := b.Resolve(ctxT(t), "node-a"); return err == nil })
	if ch := b.Gone("node-a"); ch == gone {
		t.Error("Gone returned the old, closed channel for the new incarnation")
	}
}

// TestEtcdUnreachable: Open fails within ConnectTimeout naming every
// endpoint and the cause.
func TestEtcdUnreachable(t *testing.T) {
	noLeaks(t)
	for _, url := range []string{"etcd://127.0.0.1:1", "127.0.0.1:1", "etcd://127.0.0.1:1,127.0.0.1:2"} {
		start := time.Now()
		_, err := Open(context.Background(), Options{URL: url, ConnectTimeout: time.Second})
		took := time.Since(start)
		if !errors.Is(err, errdefs.ErrPeerUnreachable) || took > time.Second+hang {
			t.Errorf("%s: %v after %s, want ErrPeerUnreachable within 1s", url, err, took)
			continue
		}
		for _, ep := range strings.Split(strings.TrimPrefix(url, "etcd://"), ",") {
			if !strings.Contains(err.Error(), ep) || !strings.Contains(err.Error(), "connection refused") {
				t.Errorf("%s: %v does not name %s and the cause", url, err, ep)
			}
		}
	}
	// A blackholed address: the dial itself times out.
	hole := blackhole(t)
	start := time.Now()
	_, err := Open(context.Background(), Options{URL: "etcd://" + hole, ConnectTimeout: 500 * time.Millisecond})
	if !errors.Is(err, errdefs.ErrPeerUnreachable) || time.Since(start) > 500*time.Millisecond+hang || !strings.Contains(err.Error(), hole) {
		t.Errorf("blackhole: %v after %s", err, time.Since(start))
	}
	// A port that accepts connections and never answers: the timeout
	// bounds Open.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	start = time.Now()
	_, err = Open(context.Background(), Options{URL: "etcd://" + ln.Addr().String(), ConnectTimeout: 700 * time.Millisecond})
	took := time.Since(start)
	if !errors.Is(err, errdefs.ErrPeerUnreachable) || took < 600*time.Millisecond || took > 700*time.Millisecond+hang ||
		!strings.Contains(err.Error(), ln.Addr().String()) || !strings.Contains(err.Error(), "did not answer within 700ms") {
		t.Errorf("silent server: %v after %s, want ErrPeerUnreachable after 700ms naming %s", err, took, ln.Addr())
	}
	if _, err := Open(context.Background(), Options{URL: "etcd://a:1,", ConnectTimeout: time.Second}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("bad URL: %v", err)
	}
}

// TestEtcdAuth: user/password against etcd with authentication enabled;
// a wrong password, missing credentials and a prefix the user may not
// read are clear errors.
func TestEtcdAuth(t *testing.T) {
	noLeaks(t)
	e := testservers.StartEtcd(t, testservers.EtcdOptions{})
	e.EnableAuth(t, "rootpw", testservers.EtcdUser{Name: "kv", Password: "kvpw", Prefix: "mooncake/prod/"})
	a := openT(t, Options{URL: e.URL(), ClusterID: "prod", Username: "kv", Password: "kvpw"})
	if err := a.Publish(ctxT(t), "n1", descriptor("n1", 1), rpcOf(15001)); err != nil {
		t.Fatal(err)
	}
	b := openT(t, Options{URL: e.URL(), ClusterID: "prod", Username: "kv", Password: "kvpw"})
	if _, err := b.Resolve(ctxT(t), "n1"); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		o    Options
		want string
	}{
		{"wrong password", Options{ClusterID: "prod", Username: "kv", Password: "nope"}, `refused user "kv": wrong user name or password`},
		{"unknown user", Options{ClusterID: "prod", Username: "who", Password: "kvpw"}, `refused user "who"`},
		{"no credentials", Options{ClusterID: "prod"}, "authentication enabled"},
		{"other prefix", Options{ClusterID: "dev", Username: "kv", Password: "kvpw"}, `user "kv" may not read mooncake/dev/`},
	}
	for _, tt := range tests {
		tt.o.URL, tt.o.ConnectTimeout = e.URL(), 3*time.Second
		_, err := Open(context.Background(), tt.o)
		if !errors.Is(err, errdefs.ErrUnauthenticated) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want ErrUnauthenticated saying %q", tt.name, err, tt.want)
		}
		if err != nil && strings.Contains(err.Error(), string(tt.o.Password)) && tt.o.Password != "" {
			t.Errorf("%s: the error shows the password: %v", tt.name, err)
		}
	}
}

// TestEtcdTLS: TLS with a CA and a client certificate; a missing client
// certificate, an untrusted server and TLS to a plain port are clear
// errors, not timeouts.
func TestEtcdTLS(t *testing.T) {
	noLeaks(t)
	pki := testservers.NewPKI(t, "kvconnect")
	e := testservers.StartEtcd(t, testservers.EtcdOptions{TLS: pki})
	full := TLSFiles{CAFile: pki.CAFile, CertFile: pki.ClientCert, KeyFile: pki.ClientKey}
	a := openT(t, Options{URL: e.URL(), TLS: full})
	if err := a.Publish(ctxT(t), "n1", descriptor("n1", 1), rpcOf(15001)); err != nil {
		t.Fatal(err)
	}
	if _, err := openT(t, Options{URL: e.URL(), TLS: full}).Resolve(ctxT(t), "n1"); err != nil {
		t.Fatal(err)
	}
	plain := testservers.StartEtcd(t, testservers.EtcdOptions{})
	other := testservers.NewPKI(t, "kvconnect")
	tests := []struct {
		name string
		url  string
		tls  TLSFiles
		is   error
		want string
	}{
		{"no client certificate", e.URL(), TLSFiles{CAFile: pki.CAFile}, errdefs.ErrUnauthenticated, "refused the handshake"},
		{"untrusted server", e.URL(), TLSFiles{CAFile: other.CAFile, CertFile: other.ClientCert, KeyFile: other.ClientKey}, errdefs.ErrUnauthenticated, "not trusted"},
		{"plain server", plain.URL(), full, errdefs.ErrUnauthenticated, "does not speak TLS"},
		{"key missing", e.URL(), TLSFiles{CertFile: pki.ClientCert}, errdefs.ErrInvalidArgument, "without its key file"},
		{"no such CA file", e.URL(), TLSFiles{CAFile: "/nonexistent/ca.crt"}, errdefs.ErrInvalidArgument, "/nonexistent/ca.crt"},
	}
	for _, tt := range tests {
		start := time.Now()
		_, err := Open(context.Background(), Options{URL: tt.url, TLS: tt.tls, ConnectTimeout: 3 * time.Second})
		// Not a timeout: well within ConnectTimeout, which a hang reaches.
		if !errors.Is(err, tt.is) || !strings.Contains(err.Error(), tt.want) || time.Since(start) > 3*time.Second+hang {
			t.Errorf("%s: %v after %s, want %v saying %q", tt.name, err, time.Since(start), tt.is, tt.want)
		}
	}
}

// TestEtcdGarbage: a key holding something that is not a descriptor (or
// not an RPC location) is an error naming the key.
func TestEtcdGarbage(t *testing.T) {
	e := testservers.StartEtcd(t, testservers.EtcdOptions{})
	cli := e.Client(t)
	for k, v := range map[string]string{
		"mooncake/ram/bad": "garbage", "mooncake/ram/arr": "[1,2]", "mooncake/ram/noname": `{"protocol":"tcp"}`,
		"mooncake/rpc_meta/bad": `{"ip_or_host_name":"h","rpc_port":"15001"}`,
	} {
		if _, err := cli.Put(ctxT(t), k, v); err != nil {
			t.Fatal(err)
		}
	}
	s := openT(t, Options{URL: e.URL()})
	for _, seg := range []string{"bad", "arr", "noname"} {
		_, err := s.Resolve(ctxT(t), seg)
		if !errors.Is(err, errdefs.ErrProtocol) || !strings.Contains(err.Error(), "mooncake/ram/"+seg) {
			t.Errorf("Resolve(%s) = %v, want ErrProtocol naming the key", seg, err)
		}
	}
	if _, err := s.ResolveRPC(ctxT(t), "bad"); !errors.Is(err, errdefs.ErrProtocol) || !strings.Contains(err.Error(), "mooncake/rpc_meta/bad") {
		t.Errorf("ResolveRPC(bad) = %v", err)
	}
	// A cached key overwritten with garbage: the watch brings it.
	if _, err := cli.Put(ctxT(t), "mooncake/ram/later", `{"name":"later"}`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Resolve(ctxT(t), "later"); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctxT(t), "mooncake/ram/later", "{"); err != nil {
		t.Fatal(err)
	}
	testbin.Eventually(t, "garbage via the watch", func() bool {
		_, err := s.Resolve(ctxT(t), "later")
		return errors.Is(err, errdefs.ErrProtocol) && strings.Contains(err.Error(), "mooncake/ram/later")
	})
	if s.Status().ResolveErrors < 5 {
		t.Errorf("resolve errors %d", s.Status().ResolveErrors)
	}
}

// TestEtcdMooncakeLayout: keys written the way a Mooncake node writes
// them (plain puts, FastWriter JSON with its newline, no lease) resolve,
// with and without a cluster id, and for a segment name with a "/".
func TestEtcdMooncakeLayout(t *testing.T) {
	e := testservers.StartEtcd(t, testservers.EtcdOptions{})
	cli := e.Client(t)
	rpc := `{"ip_or_host_name":"127.0.0.1","rpc_port":15093}` + "\n"
	for k, v := range map[string]string{
		"mooncake/ram/127.0.0.1:15093":           mooncakeDescriptor,
		"mooncake/rpc_meta/127.0.0.1:15093":      rpc,
		"mooncake/prod/ram/127.0.0.1:15093":      mooncakeDescriptor,
		"mooncake/prod/rpc_meta/127.0.0.1:15093": rpc,
		"mooncake/decode/worker-0":               mooncakeDescriptor, // segment "decode/worker-0"
	} {
		if _, err := cli.Put(ctxT(t), k, v); err != nil {
			t.Fatal(err)
		}
	}
	for _, cluster := range []string{"", "prod"} {
		s := openT(t, Options{URL: e.URL(), ClusterID: cluster})
		got, err := s.Resolve(ctxT(t), "127.0.0.1:15093")
		if err != nil || string(got) != mooncakeDescriptor {
			t.Errorf("cluster %q: Resolve = %q, %v", cluster, got, err)
		}
		loc, err := s.ResolveRPC(ctxT(t), "127.0.0.1:15093")
		if err != nil || loc != (RPCLocation{Host: "127.0.0.1", Port: 15093}) {
			t.Errorf("cluster %q: ResolveRPC = %+v, %v", cluster, loc, err)
		}
	}
	s := openT(t, Options{URL: e.URL()})
	if got, err := s.Resolve(ctxT(t), "decode/worker-0"); err != nil || string(got) != mooncakeDescriptor {
		t.Errorf("segment with a /: %q, %v", got, err)
	}
}

func TestOptionsErrors(t *testing.T) {
	tests := []struct {
		o    Options
		want string
	}{
		{Options{URL: "etcd://a:1", TTL: 500 * time.Millisecond}, "shorter than 1s"},
		{Options{URL: "etcd://a:1", Password: "x"}, "without a user name"},
		{Options{URL: "redis://u:a@h:1", Username: "v"}, `user "u" in the URL and user "v"`},
		{Options{URL: "redis://:a@h:1", Password: "b"}, "password in the URL and the one in the options differ"},
		{Options{URL: "redis://h:1/2", RedisDB: 3}, "database 2 in the URL and RedisDB 3"},
		{Options{URL: "redis://h:1", RedisDB: -1}, "negative"},
		{Options{URL: "redis://h:1", TLS: TLSFiles{CAFile: "x"}}, "use rediss://"},
		{Options{URL: "http://h:1/m", TLS: TLSFiles{CAFile: "x"}}, "use https://"},
		{Options{URL: "P2PHANDSHAKE"}, "no metadata service"},
	}
	for _, tt := range tests {
		_, err := Open(context.Background(), tt.o)
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Open(%+v) = %v, want ErrInvalidArgument saying %q", tt.o, err, tt.want)
		}
		if err != nil && (strings.Contains(err.Error(), ":a@") || strings.Contains(err.Error(), ":b@")) {
			t.Errorf("error shows a password: %v", err)
		}
	}
}

// TestEtcdWatchCompacted: a key's watch that cannot resume because its
// revision was compacted away (etcd restarted after a compaction) reads
// the key again and keeps following it.
func TestEtcdWatchCompacted(t *testing.T) {
	noLeaks(t)
	e := testservers.StartEtcd(t, testservers.EtcdOptions{})
	cli := e.Client(t)
	if _, err := cli.Put(ctxT(t), "mooncake/ram/k", `{"name":"k","v":1}`); err != nil {
		t.Fatal(err)
	}
	log, logs := observed()
	s := openT(t, Options{URL: e.URL(), ConnectTimeout: time.Second, Log: log})
	if _, err := s.Resolve(ctxT(t), "k"); err != nil {
		t.Fatal(err)
	}
	var rev int64
	for i := range 20 {
		resp, err := cli.Put(ctxT(t), "mooncake/ram/other", strings.Repeat("x", i))
		if err != nil {
			t.Fatal(err)
		}
		rev = resp.Header.Revision
	}
	if _, err := cli.Compact(ctxT(t), rev); err != nil {
		t.Fatal(err)
	}
	e.Restart()
	cli = e.Client(t)
	if _, err := cli.Put(ctxT(t), "mooncake/ram/k", `{"name":"k","v":2}`); err != nil {
		t.Fatal(err)
	}
	testbin.Eventually(t, "the new value after the watch was compacted away", func() bool {
		got, err := s.Resolve(ctxT(t), "k")
		return err == nil && string(got) == `{"name":"k","v":2}`
	})
	gone := s.Gone("k")
	if _, err := cli.Delete(ctxT(t), "mooncake/ram/k"); err != nil {
		t.Fatal(err)
	}
	testbin.WaitClosed(t, gone, "Gone after the resumed watch")
	if logs.FilterMessageSnippet("watch ended; reading the key again").Len() == 0 {
		t.Error("the watch was not compacted away: the test did not test what it says")
	}
}
