package connector_test

import (
	"context"
	"strings"
	"testing"

	"github.com/kvconnect/kvconnect/internal/testbin"
	"github.com/kvconnect/kvconnect/internal/testservers"
)

// TestStatusSaysTheMetadataServiceRefusesTheKeys: a metadata service
// that answers but refuses to store this node's keys (a Redis that wants
// a replica it lacks; a full or read-only one is alike) is a problem
// Status names, though the service is reachable; it clears once the
// keys are stored again.
func TestStatusSaysTheMetadataServiceRefusesTheKeys(t *testing.T) {
	r := testservers.StartRedis(t, testservers.RedisOptions{})
	a := metaNode(t, r.URL())
	cli := r.Client(t)
	ctx := context.Background()
	if err := cli.ConfigSet(ctx, "min-replicas-to-write", "1").Err(); err != nil {
		t.Fatal(err)
	}
	testbin.Eventually(t, "Status naming the refusal", func() bool {
		return strings.Contains(a.Status().Problem, "refuses to keep this node's keys")
	})
	if err := cli.ConfigSet(ctx, "min-replicas-to-write", "0").Err(); err != nil {
		t.Fatal(err)
	}
	testbin.Eventually(t, "the problem cleared", func() bool { return a.Status().Problem == "" })
}
