// Command embedding shows the connector API as a Go serving stack uses it:
// two nodes in one process (each with its transport plugin process), KV
// memory allocated and registered, a peer opened by session id, a batch
// submitted and waited for, Mooncake-style absolute-address transfers, a
// notification, and the node's status.
//
//	go build -o bin/ ./cmd/... ./examples/... && bin/embedding
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/kvconnect/kvconnect/connector"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "embedding:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// Two nodes. protocol rdma is what vLLM asks for by default; on a host
	// without RDMA the node falls back to tcp and Status says why.
	cfg := connector.Config{Protocol: "rdma"}
	prefill, err := connector.New(ctx, cfg)
	if err != nil {
		return err
	}
	defer prefill.Close()
	decode, err := connector.New(ctx, connector.Config{Protocol: "tcp"})
	if err != nil {
		return err
	}
	defer decode.Close()

	// KV memory lives in shared memory registered with the transports.
	src, err := prefill.Alloc(ctx, 16<<20)
	if err != nil {
		return err
	}
	dst, err := decode.Alloc(ctx, 16<<20)
	if err != nil {
		return err
	}
	for i := range src.Bytes() {
		src.Bytes()[i] = byte(i * 7)
	}

	// Open the decode node by its session id and push 16 blocks of 1 MiB.
	peer, err := prefill.Open(ctx, decode.SessionID())
	if err != nil {
		return err
	}
	regions := peer.Regions()
	if len(regions) == 0 {
		return fmt.Errorf("decode node %s published no region", decode.SessionID())
	}
	remote := regions[0]
	ops := make([]connector.Op, 16)
	for i := range ops {
		off := uint64(i) << 20
		ops[i] = connector.Op{Kind: connector.OpWrite, LocalRegion: src.ID(), LocalOffset: off,
			RemoteRegion: remote.ID, RemoteOffset: off, Length: 1 << 20}
	}
	batch, err := prefill.Submit(ctx, peer, ops)
	if err != nil {
		return err
	}
	if err := batch.Wait(ctx); err != nil {
		return err
	}
	fmt.Printf("batch: %d ops in %v, first op %s\n", len(ops), batch.Elapsed(), batch.Status(0))

	if !bytes.Equal(src.Bytes()[:16<<20], dst.Bytes()) {
		return fmt.Errorf("decode memory differs from what prefill wrote")
	}

	// By absolute addresses, as vLLM's MooncakeConnector calls it: read
	// 4 KiB of the decode node's memory back into a fresh region.
	back, err := prefill.Alloc(ctx, 4096)
	if err != nil {
		return err
	}
	if err := prefill.TransferSyncRead(ctx, decode.SessionID(), back.Addr(), remote.Addr+8192, 4096); err != nil {
		return err
	}
	if !bytes.Equal(back.Bytes(), dst.Bytes()[8192:8192+4096]) {
		return fmt.Errorf("what prefill read back differs from decode's memory")
	}

	// Tell the decode node the blocks are there.
	if err := prefill.Notify(ctx, decode.SessionID(), "kv_ready", "request-42"); err != nil {
		return err
	}
	var n connector.Notification
	select {
	case n = <-decode.Notifications():
	case <-ctx.Done():
		return fmt.Errorf("waiting for the notification: %w", ctx.Err())
	}
	fmt.Printf("decode got notification %q: %s from %s\n", n.Name, n.Msg, n.From)

	st, _ := json.MarshalIndent(prefill.Status(), "", "  ")
	fmt.Printf("prefill status:\n%s\n", st)
	return nil
}
