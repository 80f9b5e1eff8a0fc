package testservers

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestEtcd(t *testing.T) {
	e := StartEtcd(t, EtcdOptions{})
	cli := e.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	before := e.RangeRequests(t)
	if _, err := cli.Get(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if after := e.RangeRequests(t); after != before+1 {
		t.Errorf("Range requests %v -> %v, want +1", before, after)
	}
	e.Restart()
	resp, err := cli.Get(ctx, "k")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v" {
		t.Fatalf("after restart: %v %v", resp, err)
	}
	e.Kill()
	e.Start()
	if _, err := cli.Get(ctx, "k"); err != nil {
		t.Fatalf("after kill and start: %v", err)
	}
}

func TestEtcdTLSAndAuth(t *testing.T) {
	pki := NewPKI(t, "root")
	e := StartEtcd(t, EtcdOptions{TLS: pki})
	e.EnableAuth(t, "rootpw", EtcdUser{Name: "kv", Password: "kvpw", Prefix: "mooncake/"})
	cli := e.Client(t) // the client certificate's CN is root
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, "mooncake/x", "1"); err != nil {
		t.Fatal(err)
	}
}

func TestRedis(t *testing.T) {
	r := StartRedis(t, RedisOptions{Password: "s3cret"})
	c := r.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Set(ctx, "k", "v", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	n := r.Commands(t)
	c.Get(ctx, "k")
	if m := r.Commands(t); m != n+2 { // the GET and the second INFO
		t.Errorf("commands %d -> %d, want +2", n, m)
	}
	noauth := redis.NewClient(&redis.Options{Addr: r.Addr, DialerRetries: 1, MaxRetries: -1, DisableIdentity: true})
	defer noauth.Close()
	if err := noauth.Ping(ctx).Err(); !redis.IsAuthError(err) {
		t.Errorf("PING without the password: %v", err)
	}
	r.Restart()
	if err := c.Get(ctx, "k").Err(); !errors.Is(err, redis.Nil) {
		t.Errorf("after restart the key should be gone (no persistence): %v", err)
	}
}

func TestRedisTLS(t *testing.T) {
	pki := NewPKI(t, "client")
	r := StartRedis(t, RedisOptions{TLS: pki})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.Client(t).Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
}
