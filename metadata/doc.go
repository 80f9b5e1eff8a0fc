// Package metadata is the client side of a metadata service (etcd, Redis,
// or Mooncake's HTTP metadata protocol) and an HTTP metadata server, in
// Mooncake's key layout, so Mooncake Transfer Engine nodes and kvconnect
// nodes can share one store.
//
// A node opens a Service with Open, publishes its segment descriptor and
// RPC location with Publish (under an etcd lease kept alive, or Redis and
// HTTP keys that expire unless refreshed, so a node that dies vanishes
// within the TTL), resolves peers' descriptors by segment name with
// Resolve (through a watch-fed cache for etcd, a periodically refreshed
// cache for Redis and HTTP), learns that a peer's key disappeared with
// Gone, and removes its keys with Close.
//
// Keys (see Keys):
//
//	mooncake/[cluster/]ram/<segment>       segment descriptor (JSON, as published)
//	mooncake/[cluster/]rpc_meta/<segment>  {"ip_or_host_name": "10.0.0.1", "rpc_port": 15001}
//
// Connection strings (see Parse): etcd://host:port[,host:port...], a bare
// host:port (etcd, Mooncake's rule), http(s)://host:port/path,
// redis(s)://[user:password@]host:port[/db].
//
// Errors wrap the sentinels of package errdefs: ErrInvalidArgument (bad
// options), ErrPeerUnreachable (the service cannot be reached),
// ErrUnauthenticated (credentials or TLS refused), ErrUnknownPeer (no such
// key), ErrProtocol (a key holds something else), ErrClosed.
//
// NewServer returns the HTTP metadata server `kvconnect metadata-server`
// runs. docs/METADATA.md describes the modes, failure behaviour and
// interoperation with Mooncake.
package metadata
