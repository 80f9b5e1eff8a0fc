package connector_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap/zaptest"

	"github.com/kvconnect/kvconnect/connector"
	"github.com/kvconnect/kvconnect/internal/testbin"
	"github.com/kvconnect/kvconnect/internal/testservers"
	"github.com/kvconnect/kvconnect/metadata"
	"github.com/kvconnect/kvconnect/plugins/transporttest"
)

// metaNode starts a tcp node that publishes and resolves through the
// metadata service at url.
func metaNode(t *testing.T, url string) *connector.Connector {
	t.Helper()
	cfg := connector.Config{Protocol: "tcp", PluginDir: pluginDir(t), Metadata: url, MetadataTTL: time.Second, ConnectTimeout: 5 * time.Second}
	c, err := connector.New(context.Background(), cfg, connector.WithLogger(zaptest.NewLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// etcdBuffers returns how many buffers the descriptor in etcd lists for
// session, or -1 when there is no key.
func etcdBuffers(t *testing.T, e *testservers.Etcd, session string) int {
	t.Helper()
	cli := e.Client(t)
	resp, err := cli.Get(context.Background(), metadata.NewKeys("").Segment(session))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return -1
	}
	var d connector.SegmentDescriptor
	if err := json.Unmarshal(resp.Kvs[0].Value, &d); err != nil {
		t.Fatalf("descriptor in etcd: %v", err)
	}
	return len(d.Buffers)
}

// TestNodesFindEachOtherThroughEtcd: three nodes and one etcd: each opens
// the others by segment name through etcd (not their RPC ports) and moves
// verified bytes; a region allocated later is republished.
func TestNodesFindEachOtherThroughEtcd(t *testing.T) {
	e := testservers.StartEtcd(t, testservers.EtcdOptions{})
	nodes := []*connector.Connector{metaNode(t, e.URL()), metaNode(t, e.URL()), metaNode(t, e.URL())}
	ctx := context.Background()
	var srcs, dsts []*connector.Region
	for i, n := range nodes {
		srcs = append(srcs, alloc(t, n, 1<<20))
		dsts = append(dsts, alloc(t, n, 1<<20))
		transporttest.Fill(srcs[i].Bytes(), uint64(i+1))
	}
	for _, n := range nodes {
		testbin.Eventually(t, "descriptor with both regions in etcd", func() bool { return etcdBuffers(t, e, n.SessionID()) == 2 })
	}
	for i, from := range nodes {
		to := nodes[(i+1)%3]
		peer, err := from.Open(ctx, to.SessionID())
		if err != nil {
			t.Fatalf("node %d opens node %d through etcd: %v", i, (i+1)%3, err)
		}
		var dst connector.RemoteRegion
		for _, r := range peer.Regions() {
			if r.Addr == dsts[(i+1)%3].Addr() {
				dst = r
			}
		}
		if dst.Addr == 0 {
			t.Fatalf("the descriptor from etcd lists %+v, not the destination region", peer.Regions())
		}
		if err := from.TransferSyncWrite(ctx, to.SessionID(), srcs[i].Addr(), dst.Addr, 1<<20); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(dsts[(i+1)%3].Bytes(), srcs[i].Bytes()) {
			t.Fatalf("node %d -> %d: data differs", i, (i+1)%3)
		}
		if st := from.Status().Metadata; st == nil || st.Resolves == 0 || !st.Connected {
			t.Fatalf("metadata status %+v: want a resolve counted, connected", st)
		}
	}
	alloc(t, nodes[0], 4096)
	testbin.Eventually(t, "the new region republished", func() bool { return etcdBuffers(t, e, nodes[0].SessionID()) == 3 })
	session := nodes[0].SessionID()
	nodes[0].Close()
	if n := etcdBuffers(t, e, session); n != -1 {
		t.Fatalf("after Close the node's key is still in etcd (%d buffers)", n)
	}
}

// TestKilledPeerGoneFromEtcd: a node killed with SIGKILL loses its keys
// within the lease TTL; batches to it then fail at once saying it is
// gone; started again on the same address, it is reached again.
func TestKilledPeerGoneFromEtcd(t *testing.T) {
	e := testservers.StartEtcd(t, testservers.EtcdOptions{})
	a := metaNode(t, e.URL())
	args := []string{"--metadata", e.URL(), "--metadata-ttl", "1s", "--rpc-port", "0"}
	b := serve(t, nil, args...)
	ctx := context.Background()
	peer, err := a.Open(ctx, b.Session)
	if err != nil {
		t.Fatal(err)
	}
	src := alloc(t, a, 1<<20)
	write := connector.Op{Kind: connector.OpWrite, LocalRegion: src.ID(), RemoteRegion: 1, Length: 1 << 20}
	if err := a.Transfer(ctx, peer, write); err != nil {
		t.Fatal(err)
	}
	// The key lives under a lease of the node's TTL (1 s), so etcd drops
	// it that long after the node stops renewing: asked of etcd, not
	// timed, since a loaded machine delays when the test sees it.
	cli := e.Client(t)
	kv, err := cli.Get(ctx, metadata.NewKeys("").Segment(b.Session))
	if err != nil || len(kv.Kvs) == 0 {
		t.Fatalf("the node's key in etcd: %v %v", kv, err)
	}
	if lease, err := cli.TimeToLive(ctx, clientv3.LeaseID(kv.Kvs[0].Lease)); err != nil || lease.GrantedTTL != 1 {
		t.Fatalf("the node's key lease: %+v %v, want a granted TTL of 1s", lease, err)
	}
	b.kill()
	took := testbin.Eventually(t, "the killed node's key removed", func() bool { return etcdBuffers(t, e, b.Session) == -1 })
	t.Logf("key gone %v after kill -9 (TTL 1s)", took)
	// The watch tells a's cache at once; batches fail fast, saying why:
	// not after a connect attempt (ConnectTimeout is 5 s; a slow batch is
	// retried, so a loaded machine only makes this take longer).
	var err2 error
	testbin.Eventually(t, "a batch failing as gone", func() bool {
		start := time.Now()
		err2 = a.Transfer(ctx, peer, write)
		return err2 != nil && strings.Contains(err2.Error(), "is gone") && time.Since(start) < time.Second
	})
	if !errors.Is(err2, connector.ErrPeerUnreachable) || !strings.Contains(err2.Error(), "mooncake/ram/"+b.Session) {
		t.Fatalf("batch to a gone peer: %v, want ErrPeerUnreachable naming its key", err2)
	}
}

// TestEtcdRestartKeepsNodesWorking: etcd stopped: the node says so in
// Status and keeps its peers; etcd back: its key is there and new opens
// resolve again.
func TestEtcdRestartKeepsNodesWorking(t *testing.T) {
	e := testservers.StartEtcd(t, testservers.EtcdOptions{})
	a, b := metaNode(t, e.URL()), metaNode(t, e.URL())
	ctx := context.Background()
	src := alloc(t, a, 1<<20)
	alloc(t, b, 1<<20)
	peer, err := a.Open(ctx, b.SessionID())
	if err != nil {
		t.Fatal(err)
	}
	write := connector.Op{Kind: connector.OpWrite, LocalRegion: src.ID(), RemoteRegion: 1, Length: 1 << 20}
	e.Stop()
	testbin.Eventually(t, "Status showing the service lost", func() bool { st := a.Status(); return st.Metadata != nil && !st.Metadata.Connected })
	if st := a.Status(); !strings.Contains(st.Problem, "metadata service unreachable") {
		t.Errorf("status problem %q", st.Problem)
	}
	if err := a.Transfer(ctx, peer, write); err != nil {
		t.Fatalf("a batch to a known peer while etcd is down: %v", err)
	}
	e.Start()
	testbin.Eventually(t, "Status showing the service back", func() bool { st := a.Status(); return st.Metadata != nil && st.Metadata.Connected })
	testbin.Eventually(t, "both keys in etcd", func() bool {
		return etcdBuffers(t, e, a.SessionID()) == 1 && etcdBuffers(t, e, b.SessionID()) == 1
	})
	c := metaNode(t, e.URL())
	if _, err := c.Open(ctx, a.SessionID()); err != nil {
		t.Fatalf("a new node opens a through etcd after the restart: %v", err)
	}
}

// TestNodesThroughRedisAndHTTP: the same lookup works through Redis and
// through an HTTP metadata server (kvconnect's own, in-process here).
func TestNodesThroughRedisAndHTTP(t *testing.T) {
	r := testservers.StartRedis(t, testservers.RedisOptions{})
	srv := startMetadataServer(t)
	for _, url := range []string{r.URL(), srv} {
		t.Run(strings.SplitN(url, ":", 2)[0], func(t *testing.T) {
			a, b := metaNode(t, url), metaNode(t, url)
			src, dst := alloc(t, a, 1<<20), alloc(t, b, 1<<20)
			transporttest.Fill(src.Bytes(), 9)
			ctx := context.Background()
			if err := a.TransferSyncWrite(ctx, b.SessionID(), src.Addr(), dst.Addr(), 1<<20); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(dst.Bytes(), src.Bytes()) {
				t.Fatal("data differs")
			}
			if st := a.Status().Metadata; st == nil || st.Resolves == 0 {
				t.Fatalf("metadata status %+v: no resolve counted", st)
			}
		})
	}
}

// startMetadataServer serves an HTTP metadata server on loopback and
// returns its URL.
func startMetadataServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := metadata.NewServer(metadata.ServerOptions{Path: "/metadata"})
	hs := &http.Server{Handler: s}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	return "http://" + ln.Addr().String() + "/metadata"
}

// TestNotifyByName: with a metadata service, a node named by its segment
// name (Mooncake's --local_server_name) gets notifications sent to that
// name, as Open and Probe reach it.
func TestNotifyByName(t *testing.T) {
	e := testservers.StartEtcd(t, testservers.EtcdOptions{})
	cfg := connector.Config{Protocol: "tcp", PluginDir: pluginDir(t), Metadata: e.URL(), MetadataTTL: time.Second, ConnectTimeout: 5 * time.Second}
	named, err := connector.New(context.Background(), cfg, connector.WithLogger(zaptest.NewLogger(t)), connector.WithSegmentName("decode-0"))
	if err != nil {
		t.Fatal(err)
	}
	defer named.Close()
	a := metaNode(t, e.URL())
	ctx := context.Background()
	if err := a.Probe(ctx, "decode-0"); err != nil {
		t.Fatalf("Probe by name: %v", err)
	}
	if err := a.Notify(ctx, "decode-0", "req-1", "done"); err != nil {
		t.Fatalf("Notify by name: %v", err)
	}
	select {
	case n := <-named.Notifications():
		if n.Name != "req-1" || n.Msg != "done" {
			t.Fatalf("notification %+v", n)
		}
	case <-time.After(testbin.WaitLimit):
		t.Fatal("the named node got no notification")
	}
}
