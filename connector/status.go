package connector

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/kvconnect/kvconnect/metadata"
	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/plugins/host"
)

// TransportStatus describes one transport the node has up.
type TransportStatus struct {
	Name      string `json:"name"`
	Summary   string `json:"summary"` // its endpoint, for people
	Mode      string `json:"mode"`    // "plugin" or "in-process"
	PluginPID int    `json:"plugin_pid,omitempty"`
	Plugin    string `json:"plugin,omitempty"` // plugin binary
	Healthy   bool   `json:"healthy"`
	Problem   string `json:"problem,omitempty"`
	Restarts  int    `json:"restarts,omitempty"` // plugin restarts after crashes
	// Authenticates: with auth on, the transport proves the secret on
	// each of its data connections (plugins.CapAuthenticates).
	Authenticates bool `json:"authenticates,omitempty"`
	// DataPath is how batches reach a plugin: "ring" (shared-memory
	// queues, docs/DATAPATH.md) or "grpc" (a call per batch); empty
	// in-process.
	DataPath string `json:"data_path,omitempty"`
	// Ring is what the host side of the plugin's ring counted since it
	// opened (nil without one): batches through it, and the host's waits
	// for completions, caught spinning or slept (docs/OBSERVABILITY.md).
	Ring *host.RingStats `json:"ring,omitempty"`
}

// Status describes a running connector.
type Status struct {
	Session   string `json:"session"`   // this node's session id, host:port
	RPCPort   int    `json:"rpc_port"`  // the port its handshakes are served on
	Transport string `json:"transport"` // the preferred active transport
	Summary   string `json:"summary"`
	Mode      string `json:"mode"` // of the preferred transport
	PluginPID int    `json:"plugin_pid,omitempty"`
	Plugin    string `json:"plugin,omitempty"`
	// Transports are all transports up, in preference order.
	Transports []TransportStatus `json:"transports"`
	// Attempts are the chain's tries, in order, with their durations and
	// diagnoses.
	Attempts []Attempt `json:"attempts"`
	Fallback bool      `json:"fallback"` // the preferred transport is not the configured protocol
	Regions  int       `json:"regions"`
	Peers    int       `json:"peers"`
	Healthy  bool      `json:"healthy"`
	Problem  string    `json:"problem,omitempty"`
	// Notes say how the configuration was decided where inputs conflicted
	// (MC_FORCE_TCP=1 forcing protocol tcp, say) and how the hostname was
	// chosen when it was not set.
	Notes []string `json:"notes,omitempty"`
	// Auth is "auth off", or which key the node proves itself with and
	// how many it accepts (never a secret).
	Auth string `json:"auth"`
	// Metadata is the metadata service's state, when there is one.
	Metadata *metadata.Status `json:"metadata,omitempty"`
	// MetricsAddress is the address the metrics endpoint listens on
	// (metrics_address, with the port it bound), "" when it is off.
	MetricsAddress string `json:"metrics_address,omitempty"`
	// HandshakeMemory is what the node holds for handshake frames being
	// received, against max_handshake_memory.
	HandshakeMemory HandshakeMemory `json:"handshake_memory"`
}

// Status reports the transports up, how the chain got there and health.
func (c *Connector) Status() Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.transports[0]
	s := Status{
		Session: c.session, RPCPort: c.rpcPort, Transport: p.name, Summary: p.res.Summary, Mode: p.mode(),
		Attempts: append([]Attempt(nil), c.attempts...), Fallback: p.name != c.cfg.Protocol,
		Regions: len(c.regions), Peers: len(c.peers), Healthy: !c.closed,
		Notes: append([]string(nil), c.cfg.Notes...), Auth: c.auth.String(), MetricsAddress: c.metricsAddress(),
		HandshakeMemory: c.frames.status(),
	}
	if c.hostnameNote != "" {
		s.Notes = append(s.Notes, c.hostnameNote)
	}
	if p.plugin != nil {
		s.PluginPID, s.Plugin = p.plugin.Pid(), p.plugin.Path()
	}
	for _, at := range c.transports {
		ts := TransportStatus{Name: at.name, Summary: at.res.Summary, Mode: at.mode(), Healthy: at.crashed == nil, Restarts: at.restarts,
			Authenticates: c.auth != nil && at.info.Capabilities&plugins.CapAuthenticates != 0}
		if at.plugin != nil {
			ts.PluginPID, ts.Plugin = at.plugin.Pid(), at.plugin.Path()
			ts.DataPath = host.DataPath(at.plugin)
			if rs, ok := host.RingStatsOf(at.plugin); ok {
				ts.Ring = &rs
			}
		}
		if at.crashed != nil {
			ts.Problem = at.crashed.Error()
			s.Healthy = false
			if s.Problem == "" {
				s.Problem = ts.Problem
			}
		}
		s.Transports = append(s.Transports, ts)
	}
	if c.meta != nil {
		ms := c.meta.svc.Status()
		s.Metadata = &ms
		if !ms.Connected && s.Problem == "" {
			s.Problem = "metadata service unreachable since " + ms.LostSince.Format(time.RFC3339) + ": " + ms.LastError
		}
		if ms.Connected && !ms.RefusedSince.IsZero() && s.Problem == "" {
			s.Problem = "metadata service refuses to keep this node's keys since " + ms.RefusedSince.Format(time.RFC3339) +
				" (they expire within " + ms.TTL.String() + "): " + ms.LastError
		}
	}
	if c.closed {
		s.Problem = "closed"
	}
	return s
}

// PluginRingStats asks the plugin of the transport named transport what
// its side of the shared-memory ring counted since the ring opened: the
// batches its spinner, its sleeper and its standby took from the
// submission queue (host.PluginRingStats; docs/DATAPATH.md, "Waking
// up"). Status reports the host's side without asking anyone; this is a
// call to the plugin process, bounded by ctx. A plugin restarted after a
// crash counts from its new ring.
//
// Errors: ErrInvalidArgument when the node has no transport of that name
// up; ErrNotSupported when it runs in-process, without a ring (rings
// off, or none could open) or its plugin predates the call;
// ErrClosed after Close; otherwise the plugin call's (ErrTimeout,
// ErrTransportCrashed, ...).
func (c *Connector) PluginRingStats(ctx context.Context, transport string) (host.PluginRingStats, error) {
	c.mu.Lock()
	closed := c.closed
	var (
		found bool
		p     *host.Plugin // a restart replaces it under mu
		names []string
	)
	for _, at := range c.transports {
		names = append(names, at.name)
		if at.name == transport {
			found, p = true, at.plugin
		}
	}
	c.mu.Unlock()
	switch {
	case closed:
		return host.PluginRingStats{}, fmt.Errorf("connector: plugin ring stats: %w", ErrClosed)
	case !found:
		return host.PluginRingStats{}, fmt.Errorf("connector: plugin ring stats: transport %q is not up on this node (up: %s): %w", transport, strings.Join(names, ", "), ErrInvalidArgument)
	case p == nil:
		return host.PluginRingStats{}, fmt.Errorf("connector: plugin ring stats: transport %s runs in-process, with no ring: %w", transport, ErrNotSupported)
	}
	st, err := host.PluginRingStatsOf(ctx, p)
	if err != nil {
		return host.PluginRingStats{}, fmt.Errorf("connector: transport %s: %w", transport, err)
	}
	return st, nil
}
