package metrics

import (
	"context"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvconnect/kvconnect/plugins"
)

// Source is the node as a scrape reads it. Snapshot is called once per
// scrape, concurrently with anything the node does; it must be cheap
// (hold the node's locks only to copy) and must not block on the data
// path or on a plugin.
type Source interface {
	Snapshot() Snapshot
}

// SourceFunc adapts a function to Source.
type SourceFunc func() Snapshot

// Snapshot implements Source.
func (f SourceFunc) Snapshot() Snapshot { return f() }

// Snapshot is the node's state at one moment.
type Snapshot struct {
	// Transports are the transports up, in preference order (the first is
	// the preferred one).
	Transports []TransportState
	Peers      []PeerState
	// Regions and RegisteredBytes count the registered regions.
	Regions         int
	RegisteredBytes uint64
	// Metadata is the metadata service client's counts, nil without one.
	Metadata *MetadataState
}

// TransportState is one transport the node has up (or had, until its
// crashed plugin is restarted).
type TransportState struct {
	Name string
	// Plugin says it runs as a plugin process (else in-process);
	// PluginRunning says that process is alive.
	Plugin, PluginRunning bool
	// Healthy is false from a plugin crash until its restart (or for good,
	// when the node gave up restarting it).
	Healthy bool
	// Restarts is how many times its plugin was restarted after a crash.
	Restarts int
	// Instance identifies this running instance: a restarted plugin is a
	// new one (any comparable value; the connector uses its own entry).
	Instance any
	// Stats reports what it served, or is nil.
	Stats plugins.StatsReporter
	// Ring is what the host side of its plugin's shared-memory ring
	// counted, or nil (in-process, or a plugin without a ring).
	Ring *RingState
	// PluginRing asks the plugin what its side of the ring counted; nil
	// when Ring is. A scrape calls it with a deadline (StatsTimeout),
	// concurrently with other transports' calls; an error (one wrapping
	// errdefs.ErrNotSupported from a plugin that predates the call, a
	// timeout) leaves the last answer standing.
	PluginRing func(ctx context.Context) (PluginRingState, error)
}

// PeerState is one open peer.
type PeerState struct {
	Transport string // the transport that reaches it
	Mooncake  bool   // a Mooncake Transfer Engine node
	Suspect   bool   // batches to it fail fast until it answers a probe
}

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

var (
	transportUpDesc = desc("kvconnect_transport_up",
		"1 while the transport is up and healthy, 0 while it is down (its plugin crashed and is not restarted yet); preferred=\"true\" is the one the chain chose.",
		"transport", "mode", "preferred")
	pluginUpDesc = desc("kvconnect_plugin_up",
		"1 while the transport's plugin process runs, 0 after it died until it is restarted (plugin-mode transports only).", "transport")
	pluginRestartsDesc = desc("kvconnect_plugin_restarts_total",
		"Times the transport's plugin was restarted after a crash, by transport.", "transport")
	peersDesc = desc("kvconnect_peers_connected",
		"Open peers, by the transport that reaches them and kind (kvconnect or mooncake).", "transport", "kind")
	suspectPeersDesc = desc("kvconnect_peers_suspect",
		"Open peers that are suspect now (batches to them fail fast until they answer a probe).")
	regionsDesc         = desc("kvconnect_regions", "Registered regions.")
	registeredBytesDesc = desc("kvconnect_registered_bytes", "Bytes of registered region memory.")

	stateDescs = []*prometheus.Desc{transportUpDesc, pluginUpDesc, pluginRestartsDesc, peersDesc, suspectPeersDesc, regionsDesc, registeredBytesDesc}
)

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func collectState(ch chan<- prometheus.Metric, s *Snapshot) {
	for i, t := range s.Transports {
		mode := "in-process"
		if t.Plugin {
			mode = "plugin"
		}
		ch <- prometheus.MustNewConstMetric(transportUpDesc, prometheus.GaugeValue, b2f(t.Healthy), t.Name, mode, strconv.FormatBool(i == 0))
		if t.Plugin {
			ch <- prometheus.MustNewConstMetric(pluginUpDesc, prometheus.GaugeValue, b2f(t.PluginRunning), t.Name)
			ch <- prometheus.MustNewConstMetric(pluginRestartsDesc, prometheus.CounterValue, float64(t.Restarts), t.Name)
		}
	}
	type key struct{ transport, kind string }
	peers := map[key]int{}
	for _, t := range s.Transports { // every transport up shows, with 0 peers too
		peers[key{t.Name, "kvconnect"}] += 0
	}
	suspect := 0
	for _, p := range s.Peers {
		k := key{p.Transport, "kvconnect"}
		if p.Mooncake {
			k.kind = "mooncake"
		}
		peers[k]++
		if p.Suspect {
			suspect++
		}
	}
	for k, v := range peers {
		ch <- prometheus.MustNewConstMetric(peersDesc, prometheus.GaugeValue, float64(v), k.transport, k.kind)
	}
	ch <- prometheus.MustNewConstMetric(suspectPeersDesc, prometheus.GaugeValue, float64(suspect))
	ch <- prometheus.MustNewConstMetric(regionsDesc, prometheus.GaugeValue, float64(s.Regions))
	ch <- prometheus.MustNewConstMetric(registeredBytesDesc, prometheus.GaugeValue, float64(s.RegisteredBytes))
}
