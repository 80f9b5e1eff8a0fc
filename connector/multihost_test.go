package connector_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"net"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/kvconnect/kvconnect/connector"
	"github.com/kvconnect/kvconnect/internal/netns"
	"github.com/kvconnect/kvconnect/internal/testbin"
)

// These tests build "hosts" out of network namespaces on one L2 switch
// (internal/netns): this test process's namespace is one host (its node
// runs in-process, so the test holds its Peer objects), and kvconnect
// serve processes run in the others. Addresses are on 10.213.n.0/24.

// hosts builds the network, or skips naming why it cannot.
func hosts(t *testing.T, names ...string) (root *netns.Host, others []*netns.Host) {
	t.Helper()
	if err := netns.Available(); err != nil {
		t.Skipf("multi-host tests need network namespaces: %v", err)
	}
	n, err := netns.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Close(); err != nil {
			t.Errorf("removing the test network: %v", err)
		}
	})
	if root, err = n.AddRoot(); err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		h, err := n.AddHost(name)
		if err != nil {
			t.Fatal(err)
		}
		others = append(others, h)
	}
	return root, others
}

// hostNode is this process's node, reachable on root's address.
func hostNode(t *testing.T, root *netns.Host) *connector.Connector {
	t.Helper()
	cfg := connector.Config{Protocol: "tcp", PluginDir: pluginDir(t), Hostname: root.Addr,
		TransferTimeout: 3 * time.Second, ConnectTimeout: 3 * time.Second,
		Transports: map[string]map[string]any{"tcp": {"op_timeout": "2s"}}}
	c, err := connector.New(context.Background(), cfg, connector.WithLogger(zaptest.NewLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// benchIn runs `kvconnect bench --json` in host h and returns its result.
func benchIn(t *testing.T, h *netns.Host, args ...string) map[string]any {
	t.Helper()
	cli, err := testbin.Build("./cmd/kvconnect", "kvconnect")
	if err != nil {
		t.Fatal(err)
	}
	cmd := h.Command(cli, append([]string{"bench", "--json", "--plugin-dir", pluginDir(t)}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("bench %v in %s: %v\n%s%s", args, h.Addr, err, out, stderr.Bytes())
	}
	var r map[string]any
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("bench output %q: %v", out, err)
	}
	return r
}

func checkVerified(t *testing.T, what string, r map[string]any) {
	t.Helper()
	v, _ := r["verify"].(map[string]any)
	if v == nil || v["ok"] != true || v["checked"].(float64) == 0 {
		t.Fatalf("%s: verify %v", what, r["verify"])
	}
	t.Logf("%s: %v GB/s, verified %v blocks", what, r["gb_per_s"], v["checked"])
}

// roundTrip writes random bytes to the peer's first region and reads them
// back into another region, through the same Peer.
func roundTrip(ctx context.Context, c *connector.Connector, p *connector.Peer, src, back *connector.Region) error {
	for i := range src.Bytes() {
		src.Bytes()[i] = byte(rand.Uint32())
	}
	clear(back.Bytes())
	n := uint64(src.Len())
	if err := c.Transfer(ctx, p, connector.Op{Kind: connector.OpWrite, LocalRegion: src.ID(), RemoteRegion: 1, Length: n}); err != nil {
		return err
	}
	if err := c.Transfer(ctx, p, connector.Op{Kind: connector.OpRead, LocalRegion: back.ID(), RemoteRegion: 1, Length: n}); err != nil {
		return err
	}
	if !bytes.Equal(src.Bytes(), back.Bytes()) {
		return errors.New("the data read back differs from the data written")
	}
	return nil
}

// TestMultiHostTransfers: nodes on three hosts move verified data both
// ways; a node started without hostname advertises its host's outward
// address, and an initiator on another host verifies against it.
func TestMultiHostTransfers(t *testing.T) {
	root, others := hosts(t, "b", "c")
	b, c := others[0], others[1]
	a := hostNode(t, root)
	nb := serve(t, b.Command, "--alloc", "16MiB", "--rpc-port", "17001")
	if want := net.JoinHostPort(b.Addr, "17001"); nb.Session != want {
		t.Fatalf("node on host b without hostname has session %s, want %s (its outward address)", nb.Session, want)
	}
	ctx := context.Background()
	peer, err := a.Open(ctx, nb.Session)
	if err != nil {
		t.Fatal(err)
	}
	src, back := alloc(t, a, 8<<20), alloc(t, a, 8<<20)
	if err := roundTrip(ctx, a, peer, src, back); err != nil {
		t.Fatalf("a -> b: %v", err)
	}
	alloc(t, a, 16<<20) // for b's initiator
	for _, op := range []string{"write", "read"} {
		checkVerified(t, "b -> a "+op, benchIn(t, b, "--mode", "initiator", "--segment-id", a.SessionID(), "--operation", op, "--verify",
			"--buffer-size", "8MiB", "--duration", "300ms", "--threads", "2", "--batch-size", "16"))
		checkVerified(t, "c -> b "+op, benchIn(t, c, "--mode", "initiator", "--segment-id", nb.Session, "--operation", op, "--verify",
			"--buffer-size", "8MiB", "--duration", "300ms", "--threads", "2", "--batch-size", "16"))
	}
}

// TestLinkCutMidTransfer: with transfers running, the host's link goes
// down: every batch fails within the timeout, naming the peer, never with
// a bare "context canceled"; once the link is back the same Peer works.
func TestLinkCutMidTransfer(t *testing.T) {
	testbin.Long(t, "multi-host suite beyond its smoke test, TestMultiHostTransfers")
	root, others := hosts(t, "b")
	a := hostNode(t, root)
	nb := serve(t, others[0].Command, "--alloc", "16MiB")
	ctx := context.Background()
	peer, err := a.Open(ctx, nb.Session)
	if err != nil {
		t.Fatal(err)
	}
	src, back := alloc(t, a, 4<<20), alloc(t, a, 4<<20)
	if err := roundTrip(ctx, a, peer, src, back); err != nil {
		t.Fatal(err)
	}

	type outcome struct {
		err  error
		took time.Duration
	}
	results := make(chan outcome, 1024)
	stop := make(chan struct{})
	running := make(chan struct{})
	go func() {
		defer close(results)
		once := false
		for {
			select {
			case <-stop:
				return
			default:
			}
			start := time.Now()
			err := a.Transfer(ctx, peer, connector.Op{Kind: connector.OpWrite, LocalRegion: src.ID(), RemoteRegion: 1, Length: uint64(src.Len())})
			results <- outcome{err, time.Since(start)}
			if !once {
				once = true
				close(running)
			}
		}
	}()
	<-running
	if err := root.LinkDown(); err != nil {
		t.Fatal(err)
	}
	cut := time.Now()
	// Collect outcomes until one fails after the cut, and a few more.
	var failures []outcome
	deadline := time.After(30 * time.Second)
	for len(failures) < 3 {
		select {
		case o := <-results:
			if o.err != nil {
				failures = append(failures, o)
			}
		case <-deadline:
			t.Fatalf("batches did not fail within 30 s of the link going down (failures so far %d)", len(failures))
		}
	}
	close(stop)
	for range results {
	}
	t.Logf("first failure %v after the cut", time.Since(cut))
	bound := 3*time.Second + 2*time.Second // transfer_timeout plus scheduling slack
	for i, f := range failures {
		t.Logf("failure %d after %v: %v", i, f.took, f.err)
		if f.took > bound {
			t.Errorf("batch %d took %v to fail, more than transfer_timeout (3s) allows", i, f.took)
		}
		msg := f.err.Error()
		if msg == "context canceled" || msg == "context deadline exceeded" || !strings.Contains(msg, nb.Session) && !strings.Contains(msg, others[0].Addr) {
			t.Errorf("error %q does not name the peer (%s)", msg, nb.Session)
		}
	}

	if err := root.LinkUp(); err != nil {
		t.Fatal(err)
	}
	up := time.Now()
	for {
		err := roundTrip(ctx, a, peer, src, back)
		if err == nil {
			break
		}
		if time.Since(up) > 30*time.Second {
			t.Fatalf("the same Peer does not work 30 s after the link came back: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("the same Peer works again %v after the link came back", time.Since(up))
}

// TestPeerHostRestartsOnSameAddress: the node on host b is killed
// (SIGKILL, plugins too) and started again on the same address: the same
// Peer reaches the new node, and sees its new regions.
func TestPeerHostRestartsOnSameAddress(t *testing.T) {
	testbin.Long(t, "multi-host suite beyond its smoke test, TestMultiHostTransfers")
	root, others := hosts(t, "b")
	a := hostNode(t, root)
	nb := serve(t, others[0].Command, "--alloc", "8MiB", "--rpc-port", "17002")
	ctx := context.Background()
	peer, err := a.Open(ctx, nb.Session)
	if err != nil {
		t.Fatal(err)
	}
	src, back := alloc(t, a, 4<<20), alloc(t, a, 4<<20)
	if err := roundTrip(ctx, a, peer, src, back); err != nil {
		t.Fatal(err)
	}
	before := peer.Regions()[0].Addr
	nb.kill()
	if err := roundTrip(ctx, a, peer, src, back); err == nil {
		t.Fatal("a batch to a killed node succeeded")
	} else if !errors.Is(err, connector.ErrPeerUnreachable) {
		t.Fatalf("batch to a killed node: %v, want ErrPeerUnreachable", err)
	}
	nb2 := serve(t, others[0].Command, "--alloc", "8MiB", "--rpc-port", "17002")
	if nb2.Session != nb.Session {
		t.Fatalf("restarted node has session %s, want %s", nb2.Session, nb.Session)
	}
	start := time.Now()
	for {
		err := roundTrip(ctx, a, peer, src, back)
		if err == nil {
			break
		}
		if time.Since(start) > 20*time.Second {
			t.Fatalf("the restarted node is not reached again: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("reached again %v after the restart; region moved from %#x to %#x", time.Since(start), before, peer.Regions()[0].Addr)
}
