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

// TestEtcdRefusedPutKeepsTheLeaseAlive: a descriptor etcd refuses as too
// large fails its Publish as a resource etcd bounds (naming the setting),
// not as an unreachable etcd; and while the refused put is retried, the
// lease is still renewed, so the keys published before stay in etcd.
// Before, every round of the supervisor retried the put and never
// reached the renewal: after the TTL every key of the node was gone.
func TestEtcdRefusedPutKeepsTheLeaseAlive(t *testing.T) {
	e := testservers.StartEtcd(t, testservers.EtcdOptions{Args: []string{"--max-request-bytes", "65536"}})
	cli := e.Client(t)
	a := openT(t, Options{URL: e.URL(), TTL: 3 * time.Second})
	if err := a.Publish(ctxT(t), "node-a", descriptor("node-a", 1), rpcOf(15001)); err != nil {
		t.Fatal(err)
	}
	big := []byte(`{"name":"node-b","pad":"` + strings.Repeat("x", 200<<10) + `"}`)
	err := a.Publish(ctxT(t), "node-b", big, rpcOf(15002))
	if !errors.Is(err, errdefs.ErrResourceExhausted) || errors.Is(err, errdefs.ErrPeerUnreachable) || !strings.Contains(err.Error(), "--max-request-bytes") {
		t.Fatalf("Publish of a descriptor etcd refuses as too large: %v; want ErrResourceExhausted naming --max-request-bytes", err)
	}
	// The supervisor retries the refused put from now on; the lease must
	// be renewed meanwhile, twice to be sure it is not a round that ran
	// before the put failed.
	renewals := a.Status().Renewals
	testbin.Eventually(t, "the lease renewed while a put is refused", func() bool { return a.Status().Renewals >= renewals+2 })
	if _, ok := etcdGet(t, cli, "mooncake/ram/node-a"); !ok {
		t.Fatal("node-a's descriptor is gone from etcd")
	}
}

// TestEtcdClientRefusesAHugeDescriptor: a descriptor over the etcd
// client's own 2 MiB request limit (etcd itself would take it) fails as a
// bounded resource, saying which bound, not as an unreachable etcd.
func TestEtcdClientRefusesAHugeDescriptor(t *testing.T) {
	e := testservers.StartEtcd(t, testservers.EtcdOptions{Args: []string{"--max-request-bytes", "10485760"}})
	a := openT(t, Options{URL: e.URL(), TTL: 3 * time.Second})
	huge := []byte(`{"name":"node-h","pad":"` + strings.Repeat("x", 3<<20) + `"}`)
	err := a.Publish(ctxT(t), "node-h", huge, rpcOf(15003))
	if !errors.Is(err, errdefs.ErrResourceExhausted) || errors.Is(err, errdefs.ErrPeerUnreachable) || !strings.Contains(err.Error(), "2 MiB") {
		t.Fatalf("Publish of a descriptor over the client's request limit: %v; want ErrResourceExhausted naming the 2 MiB bound", err)
	}
}
