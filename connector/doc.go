// Package connector is kvconnect's embedding API: a node that registers
// shared-memory KV regions, publishes them to peers, and moves bytes to and
// from peers through a transport running as a plugin process (or
// in-process).
//
//	c, err := connector.New(ctx, connector.Config{Protocol: "tcp"})
//	defer c.Close()
//	kv, err := c.Alloc(ctx, 64<<20)                 // or RegisterFile for memory you own
//	peer, err := c.Open(ctx, "10.0.0.2:15001")      // a peer's session id
//	err = c.Transfer(ctx, peer, connector.Op{Kind: connector.OpWrite,
//		LocalRegion: kv.ID(), RemoteRegion: peer.Regions()[0].ID, Length: 1 << 20})
//	// or Mooncake-style, by absolute addresses:
//	err = c.TransferSyncWrite(ctx, "10.0.0.2:15001", kv.Addr(), remoteAddr, 1<<20)
//
// # Names
//
// A node's session id is host:port of its RPC port (Mooncake's segment
// name); Open takes a peer's. A transport's endpoint is the address its
// data path listens on, which a node publishes in its segment descriptor.
//
// # Concurrency
//
// A *Connector is safe for concurrent use: any number of goroutines may
// Alloc, Open, Submit and Notify at once. A *Peer and a *Batch are safe for
// concurrent use too; many batches may be in flight on one peer. A
// *Region's memory is the caller's: read and write it freely, but not the
// bytes an op in flight is moving, and not after Free. Close and Shutdown
// may be called at any time, from any goroutine, more than once: work in
// flight fails with ErrClosed and no method blocks past Shutdown's
// context.
//
// KV bytes never cross a plugin's gRPC socket: regions live in shared
// memory that the host and the plugin both map.
package connector
