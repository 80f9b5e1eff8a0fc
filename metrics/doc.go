// Package metrics is a kvconnect node's observability: its Prometheus
// collectors (base units, the kvconnect_ prefix, bounded labels) and the
// HTTP endpoint that serves them with /healthz, /readyz and /status.
//
// A Node holds one node's metrics. The node tells it what happens as it
// happens (batches, plugin starts and crashes, handshakes, suspect peers,
// the fallback chain; see its methods), and a scrape reads the rest from
// the node itself through Source: transports and plugin processes up,
// peers, regions, and what each transport served to peers
// (plugins.StatsReporter, asked at scrape time with a short deadline; the
// sums of plugin instances that died are kept, so served counts never go
// back), and how batches reached each plugin through its shared-memory
// ring (RingState, read from the host). Nothing is registered anywhere until Register, and never on the
// default registry. docs/OBSERVABILITY.md lists every metric.
//
// The connector builds and registers a Node when metrics are on
// (connector.WithMetrics or metrics_address); embedders rarely use this
// package directly. A metadata service client's counts come in through
// Snapshot.Metadata (MetadataState), read at scrape time too.
package metrics
