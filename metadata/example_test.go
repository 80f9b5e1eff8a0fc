package metadata_test

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"time"

	"github.com/kvconnect/kvconnect/errdefs"
	"github.com/kvconnect/kvconnect/metadata"
)

// Two nodes find each other by segment name through an HTTP metadata
// server (etcd:// and redis:// URLs work the same way).
func Example() {
	srv := httptest.NewServer(metadata.NewServer(metadata.ServerOptions{}))
	defer srv.Close()
	url := srv.URL + "/metadata"
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	prefill, err := metadata.Open(ctx, metadata.Options{URL: url, TTL: 10 * time.Second})
	if err != nil {
		fmt.Println(err)
		return
	}
	desc := []byte(`{"name":"10.0.0.1:15001","protocol":"tcp","tcp_data_port":16001,"buffers":[]}`)
	if err := prefill.Publish(ctx, "10.0.0.1:15001", desc, metadata.RPCLocation{Host: "10.0.0.1", Port: 15001}); err != nil {
		fmt.Println(err)
		return
	}

	// RefreshInterval: how often the cached descriptors are re-read (so how
	// soon Gone fires); etcd pushes changes instead.
	decode, err := metadata.Open(ctx, metadata.Options{URL: url, RefreshInterval: 100 * time.Millisecond})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer decode.Close(ctx)
	got, _ := decode.Resolve(ctx, "10.0.0.1:15001")
	rpc, _ := decode.ResolveRPC(ctx, "10.0.0.1:15001")
	fmt.Printf("%s\nrpc at %s\n", got, rpc)

	gone := decode.Gone("10.0.0.1:15001")
	prefill.Close(ctx) // deletes its keys
	<-gone
	_, err = decode.Resolve(ctx, "10.0.0.1:15001")
	fmt.Println(errors.Is(err, errdefs.ErrUnknownPeer))
	// Output:
	// {"name":"10.0.0.1:15001","protocol":"tcp","tcp_data_port":16001,"buffers":[]}
	// rpc at 10.0.0.1:15001
	// true
}

// The keys a node publishes, in Mooncake's layout.
func ExampleKeys() {
	k := metadata.NewKeys("prod") // MC_METADATA_CLUSTER_ID=prod
	fmt.Println(k.Segment("10.0.0.1:15001"))
	fmt.Println(k.RPC("10.0.0.1:15001"))
	fmt.Println(metadata.NewKeys("").Segment("decode/worker-0"))
	// Output:
	// mooncake/prod/ram/10.0.0.1:15001
	// mooncake/prod/rpc_meta/10.0.0.1:15001
	// mooncake/decode/worker-0
}
