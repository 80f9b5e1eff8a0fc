package connector_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"golang.org/x/sys/unix"

	"github.com/kvconnect/kvconnect/connector"
)

// Two nodes in one process (tcp in-process, so no plugin binary is
// needed): the prefill side writes a block into the decode side's region.
func Example() {
	ctx := context.Background()
	cfg := connector.Config{Protocol: "tcp", Hostname: "127.0.0.1"}
	decode, err := connector.New(ctx, cfg, connector.WithInProcess("tcp"))
	if err != nil {
		log.Fatal(err)
	}
	defer decode.Close()
	prefill, err := connector.New(ctx, cfg, connector.WithInProcess("tcp"))
	if err != nil {
		log.Fatal(err)
	}
	defer prefill.Close()

	kv, _ := decode.Alloc(ctx, 1<<20) // the decode side's KV buffer
	block, _ := prefill.Alloc(ctx, 4096)
	copy(block.Bytes(), "layer 0, block 7")

	peer, err := prefill.Open(ctx, decode.SessionID())
	if err != nil {
		log.Fatal(err)
	}
	err = prefill.Transfer(ctx, peer, connector.Op{Kind: connector.OpWrite,
		LocalRegion: block.ID(), RemoteRegion: kv.ID(), RemoteOffset: 8192, Length: 4096})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s\n", kv.Bytes()[8192:8192+16])
	// Output: layer 0, block 7
}

// Submit starts a batch and returns at once; each op completes with its
// own status, as Mooncake's batch_transfer_async and
// get_batch_transfer_status report them.
func ExampleConnector_Submit() {
	ctx := context.Background()
	cfg := connector.Config{Protocol: "tcp", Hostname: "127.0.0.1"}
	a, _ := connector.New(ctx, cfg, connector.WithInProcess("tcp"))
	defer a.Close()
	b, _ := connector.New(ctx, cfg, connector.WithInProcess("tcp"))
	defer b.Close()
	src, _ := a.Alloc(ctx, 64<<10)
	dst, _ := b.Alloc(ctx, 64<<10)
	peer, _ := a.Open(ctx, b.SessionID())

	batch, err := a.Submit(ctx, peer, []connector.Op{
		{Kind: connector.OpWrite, LocalRegion: src.ID(), RemoteRegion: dst.ID(), Length: 32 << 10},
		{Kind: connector.OpWrite, LocalRegion: src.ID(), RemoteRegion: dst.ID(), RemoteOffset: 60 << 10, Length: 8 << 10}, // runs past the end
	})
	if err != nil {
		log.Fatal(err)
	}
	<-batch.Done()
	fmt.Println(batch.Status(0), batch.Status(1))
	// Output: COMPLETED FAILED
}

// TransferSyncWrite addresses memory as Mooncake's transfer_sync_write
// does: local and remote absolute addresses, the peer by session id
// (opened and cached on first use).
func ExampleConnector_TransferSyncWrite() {
	ctx := context.Background()
	cfg := connector.Config{Protocol: "tcp", Hostname: "127.0.0.1"}
	a, _ := connector.New(ctx, cfg, connector.WithInProcess("tcp"))
	defer a.Close()
	b, _ := connector.New(ctx, cfg, connector.WithInProcess("tcp"))
	defer b.Close()
	src, _ := a.Alloc(ctx, 4096)
	dst, _ := b.Alloc(ctx, 4096)
	copy(src.Bytes(), "hello")

	if err := a.TransferSyncWrite(ctx, b.SessionID(), src.Addr(), dst.Addr()+100, 5); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s\n", dst.Bytes()[100:105])
	// Output: hello
}

// RegisterFile registers memory the caller already owns, here a range of
// a sealed memfd.
func ExampleConnector_RegisterFile() {
	ctx := context.Background()
	c, _ := connector.New(ctx, connector.Config{Protocol: "tcp", Hostname: "127.0.0.1"}, connector.WithInProcess("tcp"))
	defer c.Close()

	fd, _ := unix.MemfdCreate("my-kv-cache", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	f := os.NewFile(uintptr(fd), "my-kv-cache")
	defer f.Close()
	unix.Ftruncate(fd, 8<<20)
	unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK) // it cannot shrink under a mapping

	r, err := c.RegisterFile(ctx, f, 1<<20, 4<<20)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(r.Len(), c.Status().Regions)
	// Output: 4194304 1
}

// New walks the fallback chain: rdma cannot start here (no plugin
// binary on this path, or no RDMA device), so the node runs on tcp, and
// Status says so.
func ExampleNew_fallback() {
	ctx := context.Background()
	cfg := connector.Config{Protocol: "rdma", Hostname: "127.0.0.1", PluginDir: os.DevNull}
	c, err := connector.New(ctx, cfg, connector.WithInProcess("tcp"))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	st := c.Status()
	for _, a := range st.Attempts {
		fmt.Println(a.Transport, a.OK)
	}
	fmt.Println("fallback:", st.Fallback)
	// Output:
	// rdma false
	// tcp true
	// fallback: true
}

// Memory the program already has (here a Go slice; from C or Python, any
// buffer's address) is registered where it is: a peer writes into it by
// its own address. Free gives it back as it was, contents kept.
func ExampleConnector_RegisterMemory() {
	ctx := context.Background()
	cfg := connector.Config{Protocol: "tcp", Hostname: "127.0.0.1"}
	decode, err := connector.New(ctx, cfg, connector.WithInProcess("tcp"))
	if err != nil {
		log.Fatal(err)
	}
	defer decode.Close()
	prefill, err := connector.New(ctx, cfg, connector.WithInProcess("tcp"))
	if err != nil {
		log.Fatal(err)
	}
	defer prefill.Close()

	kv := make([]byte, 1<<20) // the decode side's own buffer
	r, err := decode.RegisterMemory(ctx, kv)
	if err != nil {
		log.Fatal(err)
	}
	block, _ := prefill.Alloc(ctx, 4096)
	copy(block.Bytes(), "layer 3, block 1")
	if err := prefill.TransferSyncWrite(ctx, decode.SessionID(), block.Addr(), r.Addr()+4096, 16); err != nil {
		log.Fatal(err)
	}
	if err := r.Free(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(kv[4096 : 4096+16]))
	// Output: layer 3, block 1
}
