package metadata

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/kvconnect/kvconnect/errdefs"
	"github.com/kvconnect/kvconnect/internal/testbin"
	"github.com/kvconnect/kvconnect/internal/testservers"
)

// TestRedisRefusedRenewalsAreReported: a Redis that answers but refuses
// every write (here: it wants a replica it does not have, as a
// read-only or full one refuses too) makes the renewals of this node's
// keys fail without the service being lost. Status says since when they
// are refused, a warning says it once, and both clear when Redis stores
// the keys again. Before, the refusals were only in LastError: the keys
// expired while the node reported itself healthy.
func TestRedisRefusedRenewalsAreReported(t *testing.T) {
	r := testservers.StartRedis(t, testservers.RedisOptions{})
	c := r.Client(t)
	log, logs := observed()
	a := openT(t, Options{URL: r.URL(), TTL: 1500 * time.Millisecond, Log: log})
	if err := a.Publish(ctxT(t), "n1", descriptor("n1", 1), rpcOf(15001)); err != nil {
		t.Fatal(err)
	}
	if st := a.Status(); !st.RefusedSince.IsZero() {
		t.Fatalf("refused since %v before any refusal", st.RefusedSince)
	}
	if err := c.ConfigSet(ctxT(t), "min-replicas-to-write", "1").Err(); err != nil {
		t.Fatal(err)
	}
	testbin.Eventually(t, "the refusals reported", func() bool { return !a.Status().RefusedSince.IsZero() })
	if st := a.Status(); !st.Connected || !strings.Contains(st.LastError, "NOREPLICAS") {
		t.Errorf("status while refused: connected %v, last error %q; want connected, the refusal as last error with its cause (NOREPLICAS, not only the transaction's EXECABORT)", st.Connected, st.LastError)
	}
	if err := c.ConfigSet(ctxT(t), "min-replicas-to-write", "0").Err(); err != nil {
		t.Fatal(err)
	}
	testbin.Eventually(t, "the refusals cleared", func() bool { return a.Status().RefusedSince.IsZero() })
	if n := logs.FilterMessageSnippet("refuses to keep this node's keys").Len(); n != 1 {
		t.Errorf("%d refusal warnings, want 1", n)
	}
	if n := logs.FilterMessageSnippet("keeps this node's keys again").Len(); n != 1 {
		t.Errorf("%d lines saying the keys are kept again, want 1", n)
	}
}

// TestRedisResolverFindsTheServiceBack: a Service that publishes nothing
// and has nothing cached, marked lost by a Resolve that failed, finds
// the service back once it answers again, and resolves through it.
// Before, nothing was sent to the service after that Resolve: it stayed
// lost, and every later Resolve failed without asking it.
func TestRedisResolverFindsTheServiceBack(t *testing.T) {
	r := testservers.StartRedis(t, testservers.RedisOptions{})
	b := openT(t, Options{URL: r.URL(), TTL: 1500 * time.Millisecond, ConnectTimeout: 300 * time.Millisecond})
	r.Stop()
	if _, err := b.Resolve(ctxT(t), "n1"); !errors.Is(err, errdefs.ErrPeerUnreachable) {
		t.Fatalf("Resolve with Redis stopped: %v, want ErrPeerUnreachable", err)
	}
	if b.Status().Connected {
		t.Fatal("a failed Resolve did not mark the service lost")
	}
	r.Start()
	testbin.Eventually(t, "connected again", func() bool { return b.Status().Connected })
	a := openT(t, Options{URL: r.URL()})
	if err := a.Publish(ctxT(t), "n1", descriptor("n1", 1), rpcOf(15001)); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Resolve(ctxT(t), "n1"); err != nil {
		t.Fatalf("Resolve once Redis is back: %v", err)
	}
}
