package metadata

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kvconnect/kvconnect/errdefs"
	"github.com/kvconnect/kvconnect/internal/testbin"
	"github.com/kvconnect/kvconnect/internal/testservers"
)

func redisGet(t *testing.T, c *redis.Client, key string) (string, bool) {
	t.Helper()
	v, err := c.Get(ctxT(t), key).Result()
	if errors.Is(err, redis.Nil) {
		return "", false
	}
	if err != nil {
		t.Fatalf("GET %s: %v", key, err)
	}
	return v, true
}

// TestRedisPublishResolve: the keys are Mooncake's with an expiry of TTL;
// another node resolves them, then from its cache; Close deletes them and
// the resolver's Gone fires at its next refresh.
func TestRedisPublishResolve(t *testing.T) {
	noLeaks(t)
	r := testservers.StartRedis(t, testservers.RedisOptions{Password: "s3cret"})
	c := r.Client(t)
	a, err := Open(ctxT(t), Options{URL: r.URL(), Password: "s3cret", TTL: 3 * time.Second, ClusterID: "prod"})
	if err != nil {
		t.Fatal(err)
	}
	d := descriptor("10.0.0.1:15001", 1)
	published := time.Now()
	if err := a.Publish(ctxT(t), "10.0.0.1:15001", d, RPCLocation{Host: "10.0.0.1", Port: 15001}); err != nil {
		t.Fatal(err)
	}
	if v, ok := redisGet(t, c, "mooncake/prod/ram/10.0.0.1:15001"); !ok || v != string(d) {
		t.Errorf("ram key = %q, %v", v, ok)
	}
	if v, _ := redisGet(t, c, "mooncake/prod/rpc_meta/10.0.0.1:15001"); v != `{"ip_or_host_name":"10.0.0.1","rpc_port":15001}` {
		t.Errorf("rpc_meta key = %q", v)
	}
	// Set to 3 s at the publish (or a renewal since): at most 3 s left,
	// and no less than 3 s minus the time since.
	if ttl := c.PTTL(ctxT(t), "mooncake/prod/ram/10.0.0.1:15001").Val(); ttl < 3*time.Second-time.Since(published)-time.Millisecond || ttl > 3*time.Second {
		t.Errorf("PTTL %s, want 3s less the %v since the publish", ttl, time.Since(published))
	}

	b := openT(t, Options{URL: r.URL(), Password: "s3cret", ClusterID: "prod", TTL: 3 * time.Second, RefreshInterval: 200 * time.Millisecond})
	got, err := b.Resolve(ctxT(t), "10.0.0.1:15001")
	if err != nil || string(got) != string(d) {
		t.Fatalf("Resolve = %s, %v", got, err)
	}
	if loc, err := b.ResolveRPC(ctxT(t), "10.0.0.1:15001"); err != nil || loc.Port != 15001 {
		t.Errorf("ResolveRPC = %+v, %v", loc, err)
	}
	hits := b.Status().CacheHits
	for range 100 {
		if _, err := b.Resolve(ctxT(t), "10.0.0.1:15001"); err != nil {
			t.Fatal(err)
		}
	}
	if st := b.Status(); st.CacheHits != hits+100 {
		t.Errorf("cache hits %d -> %d", hits, st.CacheHits)
	}
	// The descriptor changes: the resolver's cache picks it up at its next
	// refresh.
	d2 := descriptor("10.0.0.1:15001", 2)
	if err := a.Publish(ctxT(t), "10.0.0.1:15001", d2, RPCLocation{Host: "10.0.0.1", Port: 15001}); err != nil {
		t.Fatal(err)
	}
	testbin.Eventually(t, "the resolver sees the new descriptor", func() bool {
		got, _ := b.Resolve(ctxT(t), "10.0.0.1:15001")
		return string(got) == string(d2)
	})
	gone := b.Gone("10.0.0.1:15001")
	if err := a.Close(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if _, ok := redisGet(t, c, "mooncake/prod/ram/10.0.0.1:15001"); ok {
		t.Error("the key is still there right after Close")
	}
	testbin.WaitClosed(t, gone, "Gone after the peer closed")
	if _, err := b.Resolve(ctxT(t), "10.0.0.1:15001"); !errors.Is(err, errdefs.ErrUnknownPeer) || !strings.Contains(err.Error(), "mooncake/prod/ram/10.0.0.1:15001") {
		t.Errorf("after Close: %v", err)
	}
}

// TestRedisCacheRequests: repeated resolves send no command to Redis
// (counted by the server itself).
func TestRedisCacheRequests(t *testing.T) {
	r := testservers.StartRedis(t, testservers.RedisOptions{})
	a := openT(t, Options{URL: r.URL(), TTL: time.Minute})
	if err := a.Publish(ctxT(t), "n1", descriptor("n1", 1), rpcOf(15001)); err != nil {
		t.Fatal(err)
	}
	b := openT(t, Options{URL: r.URL(), TTL: time.Minute, RefreshInterval: time.Minute})
	if _, err := b.Resolve(ctxT(t), "n1"); err != nil {
		t.Fatal(err)
	}
	before := r.Commands(t)
	for range 200 {
		if _, err := b.Resolve(ctxT(t), "n1"); err != nil {
			t.Fatal(err)
		}
	}
	if after := r.Commands(t); after != before+1 { // the INFO of Commands itself
		t.Errorf("200 cached resolves sent %d commands to Redis, want 0", after-before-1)
	}
}

// TestRedisNodeKilled: a node killed with SIGKILL stops refreshing its
// keys; they expire within TTL and the resolver's Gone fires.
func TestRedisNodeKilled(t *testing.T) {
	r := testservers.StartRedis(t, testservers.RedisOptions{Password: "pw"})
	c := r.Client(t)
	b := openT(t, Options{URL: r.URL(), Password: "pw", RefreshInterval: 100 * time.Millisecond})
	node := startNode(t, r.URL(), "pw", "victim")
	if _, err := b.Resolve(ctxT(t), "victim"); err != nil {
		t.Fatal(err)
	}
	gone := b.Gone("victim")
	node.renewed(t, 2) // refreshed while the node lives
	if _, ok := redisGet(t, c, "mooncake/ram/victim"); !ok {
		t.Fatal("the key expired while its node was alive")
	}
	killed := time.Now()
	node.Process.Signal(syscall.SIGKILL)
	node.Wait()
	testbin.WaitClosed(t, gone, "Gone after kill -9")
	if _, ok := redisGet(t, c, "mooncake/rpc_meta/victim"); ok {
		t.Error("rpc_meta outlived its node")
	}
	t.Logf("gone %s after kill -9 (TTL %v, refresh 100ms)", time.Since(killed).Round(time.Millisecond), helperTTL)
}

// TestRedisRestart: Redis restarted without persistence loses every key;
// the node notices, logs it once, and writes its keys again.
func TestRedisRestart(t *testing.T) {
	noLeaks(t)
	r := testservers.StartRedis(t, testservers.RedisOptions{})
	c := r.Client(t)
	log, logs := observed()
	a := openT(t, Options{URL: r.URL(), TTL: 1500 * time.Millisecond, ConnectTimeout: 300 * time.Millisecond, Log: log})
	if err := a.Publish(ctxT(t), "n1", descriptor("n1", 1), rpcOf(15001)); err != nil {
		t.Fatal(err)
	}
	b := openT(t, Options{URL: r.URL(), ConnectTimeout: 300 * time.Millisecond, RefreshInterval: 100 * time.Millisecond})
	if _, err := b.Resolve(ctxT(t), "n1"); err != nil {
		t.Fatal(err)
	}
	r.Stop()
	testbin.Eventually(t, "the node notices the outage", func() bool { return !a.Status().Connected })
	testbin.Eventually(t, "the resolver notices the outage", func() bool { return !b.Status().Connected })
	if _, err := b.Resolve(ctxT(t), "n1"); err != nil {
		t.Errorf("cached resolve during the outage: %v", err)
	}
	if _, err := b.Resolve(ctxT(t), "n2"); !errors.Is(err, errdefs.ErrPeerUnreachable) || !strings.Contains(err.Error(), r.Addr) {
		t.Errorf("uncached resolve during the outage: %v", err)
	}
	time.Sleep(500 * time.Millisecond) // failed retries: one log line all the same
	r.Start()
	testbin.Eventually(t, "republished", func() bool { _, ok := redisGet(t, c, "mooncake/ram/n1"); return ok })
	testbin.Eventually(t, "connected again", func() bool { return a.Status().Connected })
	// The counters move after the write that brought the node back has
	// returned, a moment after Redis holds the key: wait for them.
	testbin.Eventually(t, "the republish counted", func() bool { return a.Status().Republishes >= 1 })
	if st := a.Status(); st.Outages != 1 {
		t.Errorf("status %+v", st.Counters)
	}
	if n := logs.FilterMessageSnippet("metadata service lost").Len(); n != 1 {
		t.Errorf("%d 'lost' lines, want 1", n)
	}
}

// TestRedisErrors: unreachable, wrong or missing password, a key of
// another type and garbage are clear errors.
func TestRedisErrors(t *testing.T) {
	noLeaks(t)
	start := time.Now()
	_, err := Open(context.Background(), Options{URL: "redis://127.0.0.1:1", ConnectTimeout: time.Second})
	if !errors.Is(err, errdefs.ErrPeerUnreachable) || !strings.Contains(err.Error(), "127.0.0.1:1") || time.Since(start) > time.Second+hang {
		t.Errorf("unreachable: %v after %s", err, time.Since(start))
	}
	r := testservers.StartRedis(t, testservers.RedisOptions{Password: "s3cret"})
	for _, tt := range []struct {
		o    Options
		want string
	}{
		{Options{URL: r.URL(), Password: "wrong"}, "wrong user name or password"},
		{Options{URL: "redis://:wrong@" + r.Addr}, "wrong user name or password"},
		{Options{URL: r.URL()}, "no password was given"},
	} {
		tt.o.ConnectTimeout = 2 * time.Second
		_, err := Open(context.Background(), tt.o)
		if !errors.Is(err, errdefs.ErrUnauthenticated) || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), r.Addr) {
			t.Errorf("%s: %v, want ErrUnauthenticated saying %q", tt.o.URL, err, tt.want)
		}
		if err != nil && strings.Contains(err.Error(), "wrong@") {
			t.Errorf("error shows the password: %v", err)
		}
	}
	c := r.Client(t)
	c.HSet(ctxT(t), "mooncake/ram/hash", "a", "b")
	c.Set(ctxT(t), "mooncake/ram/bad", "garbage", 0)
	s := openT(t, Options{URL: "redis://:s3cret@" + r.Addr})
	if _, err := s.Resolve(ctxT(t), "hash"); !errors.Is(err, errdefs.ErrProtocol) || !strings.Contains(err.Error(), "mooncake/ram/hash") {
		t.Errorf("a hash under the key: %v", err)
	}
	if _, err := s.Resolve(ctxT(t), "bad"); !errors.Is(err, errdefs.ErrProtocol) || !strings.Contains(err.Error(), "mooncake/ram/bad") {
		t.Errorf("garbage: %v", err)
	}
}

// TestRedisDBAndTLS: MC_REDIS_DB_INDEX's database, and rediss:// with a
// private CA.
func TestRedisDBAndTLS(t *testing.T) {
	r := testservers.StartRedis(t, testservers.RedisOptions{})
	a := openT(t, Options{URL: r.URL(), RedisDB: 3})
	if err := a.Publish(ctxT(t), "n1", descriptor("n1", 1), rpcOf(15001)); err != nil {
		t.Fatal(err)
	}
	c := r.Client(t)
	if _, ok := redisGet(t, c, "mooncake/ram/n1"); ok {
		t.Error("the key landed in db 0")
	}
	if _, err := openT(t, Options{URL: r.URL() + "/3"}).Resolve(ctxT(t), "n1"); err != nil {
		t.Errorf("db 3: %v", err)
	}

	pki := testservers.NewPKI(t, "kvconnect")
	rt := testservers.StartRedis(t, testservers.RedisOptions{TLS: pki, Password: "pw"})
	s := openT(t, Options{URL: rt.URL(), Password: "pw", TLS: TLSFiles{CAFile: pki.CAFile}})
	if err := s.Publish(ctxT(t), "n1", descriptor("n1", 1), rpcOf(15001)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Resolve(ctxT(t), "n1"); err != nil {
		t.Fatal(err)
	}
	// The certificate check fails at once: the timeout only bounds a hang.
	_, err := Open(context.Background(), Options{URL: rt.URL(), Password: "pw", ConnectTimeout: hang})
	if !errors.Is(err, errdefs.ErrUnauthenticated) || !strings.Contains(err.Error(), "not trusted") {
		t.Errorf("rediss without the CA: %v", err)
	}
	start := time.Now()
	_, err = Open(context.Background(), Options{URL: "rediss://" + r.Addr, ConnectTimeout: 500 * time.Millisecond})
	if err == nil || time.Since(start) > 500*time.Millisecond+hang {
		t.Errorf("rediss to a plain port: %v after %s", err, time.Since(start))
	}
}
