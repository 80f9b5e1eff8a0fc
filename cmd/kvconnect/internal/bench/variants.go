package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/kvconnect/kvconnect/connector"
	"github.com/kvconnect/kvconnect/plugins/host"
	"github.com/kvconnect/kvconnect/transports/names"
	"github.com/kvconnect/kvconnect/transports/tcp"
)

// The suite's variants: what each one is, how it starts, and the
// benchers that measure it.

// Variant names.
const (
	VariantRaw       = "raw Go TCP"
	VariantRaw1      = "raw Go TCP, 1 process"
	VariantTCPPlugin = "tcp plugin"
	// VariantTCPMetrics is VariantTCPPlugin with both nodes' metrics
	// endpoints on (metrics_address), scraped every ScrapeInterval.
	VariantTCPMetrics = "tcp plugin, metrics on"
	// VariantTCPMetricsOff is what VariantTCPMetrics is compared with: a
	// pair started as VariantTCPPlugin is, that runs only in that
	// comparison, so both pairs sit as idle between rounds (a pair that
	// has just run the other workloads is faster in its next second than
	// one that has not: docs/DATAPATH-ROUNDS.md, sixteenth round).
	VariantTCPMetricsOff = "tcp plugin, metrics off"
	VariantTCPInProc     = "tcp in-process"
	// The two-process variants: the initiator node in this process, the
	// target node in a process of its own (as deployed), tcp as a plugin
	// on both sides or in-process on both.
	VariantTCPPlugin2P = "tcp plugin, 2 processes"
	VariantTCPInProc2P = "tcp in-process, 2 processes"
	// VariantFloorC is the C ping-pong between two processes: the floor.
	VariantFloorC      = "C TCP ping-pong, 2 processes"
	VariantUCXPlugin   = "ucx plugin"
	VariantEFAPlugin   = "efa plugin"
	VariantMCtoMC      = "Mooncake → Mooncake"
	VariantMCPtoMC     = "Mooncake pooled → Mooncake"
	VariantMCtoKV      = "Mooncake → kvconnect"
	VariantMCPtoKV     = "Mooncake pooled → kvconnect"
	VariantKVtoMC      = "kvconnect → Mooncake"
	variantLatencyNote = "batch 1, 1 thread"
)

// bencher runs one variant's measurements.
type bencher interface {
	run(ctx context.Context, w Workload, p *Progress, label string) (Result, error)
	close() error
}

type rawBencher struct{ r *Raw }

func (b rawBencher) run(ctx context.Context, w Workload, p *Progress, label string) (Result, error) {
	res, _, err := b.r.Run(ctx, w, p, label)
	return res, err
}
func (b rawBencher) close() error { return b.r.Close() }

type pairBencher struct {
	p      *Pair
	detail string // the transport options that worked, for the report
}

func (b pairBencher) run(ctx context.Context, w Workload, p *Progress, label string) (Result, error) {
	r, _, err := Run(ctx, RunInput{Initiator: b.p.Initiator, Peer: b.p.Peer, Workload: w, PIDs: b.p.PluginPIDs(), Progress: p, Label: label})
	return r, err
}
func (b pairBencher) close() error { return b.p.Close() }

// TCPConnections is transports.tcp.connections of cfg, read with the tcp
// transport's own option parser (its default when unset, its range).
func TCPConnections(cfg connector.Config) (int, error) {
	o, err := tcp.ParseOptions(cfg.Transports[tcp.Name])
	if err != nil {
		return 0, err
	}
	return o.Connections, nil
}

// variantSetup starts one variant, or says why it cannot run.
type variantSetup struct {
	status   VariantStatus
	required bool // the suite fails if it cannot start
	start    func(ctx context.Context) (bencher, error)
}

func (o *SuiteOptions) variants(conns int) []variantSetup {
	log := o.Log
	strict := func(protocol string, transportOpts map[string]any) connector.Config {
		cfg := withoutMetrics(o.Config)
		cfg.Protocol, cfg.Fallback = protocol, []string{}
		if transportOpts != nil {
			ts := make(map[string]map[string]any, len(cfg.Transports)+1)
			for k, v := range cfg.Transports {
				ts[k] = v
			}
			merged := map[string]any{}
			for k, v := range cfg.Transports[protocol] {
				merged[k] = v
			}
			for k, v := range transportOpts {
				merged[k] = v
			}
			ts[protocol] = merged
			cfg.Transports = ts
		}
		return cfg
	}
	nodeOpts := func(extra ...connector.Option) []connector.Option {
		return append([]connector.Option{connector.WithLogger(log), connector.WithKeepTCP(false)}, extra...)
	}
	pair := func(cfg connector.Config, want string, opts []connector.Option) func(ctx context.Context) (bencher, error) {
		return func(ctx context.Context) (bencher, error) {
			p, err := StartPair(ctx, cfg, o.BufferSize, opts...)
			if err != nil {
				return nil, err
			}
			if p.Peer.Transport() != want {
				p.Close()
				return nil, fmt.Errorf("the nodes talk over %s, not %s", p.Peer.Transport(), want)
			}
			return pairBencher{p: p}, nil
		}
	}
	raw := func(server []string) func(context.Context) (bencher, error) {
		return func(context.Context) (bencher, error) {
			r, err := NewRaw(RawOptions{Conns: conns, BufferSize: o.BufferSize, ServerCommand: server})
			if err != nil {
				return nil, err
			}
			return rawBencher{r}, nil
		}
	}
	var vs []variantSetup
	if len(o.RawServer) > 0 {
		vs = append(vs, variantSetup{required: true,
			status: VariantStatus{Name: VariantRaw, Transport: "raw", Mode: "2 processes", Detail: fmt.Sprintf("%d connections; the server is a process", conns)},
			start:  raw(append(slices.Clone(o.RawServer), "--buffer-size", strconv.Itoa(o.BufferSize)))})
	}
	vs = append(vs, []variantSetup{
		{required: true, status: VariantStatus{Name: VariantRaw1, Transport: "raw", Mode: "1 process", Detail: fmt.Sprintf("%d connections; client and server in this process", conns)},
			start: raw(nil)},
		{required: true, status: VariantStatus{Name: VariantTCPPlugin, Transport: tcp.Name, Mode: "plugin", Detail: fmt.Sprintf("%d connections", conns)},
			start: pair(strict(tcp.Name, nil), tcp.Name, nodeOpts())},
		{required: true, status: VariantStatus{Name: VariantTCPMetrics, Transport: tcp.Name, Mode: "plugin",
			Detail: fmt.Sprintf("%d connections; metrics_address on both nodes, each scraped every %v", conns, ScrapeInterval)},
			start: func(ctx context.Context) (bencher, error) {
				b, err := pair(withMetricsEndpoint(strict(tcp.Name, nil)), tcp.Name, nodeOpts())(ctx)
				if err != nil {
					return nil, err
				}
				return newMetricsBencher(b.(pairBencher).p), nil
			}},
		{required: true, status: VariantStatus{Name: VariantTCPMetricsOff, Transport: tcp.Name, Mode: "plugin",
			Detail: fmt.Sprintf("%d connections; runs only against %s", conns, VariantTCPMetrics)},
			start: pair(strict(tcp.Name, nil), tcp.Name, nodeOpts())},
		{required: true, status: VariantStatus{Name: VariantTCPInProc, Transport: tcp.Name, Mode: "in-process", Detail: fmt.Sprintf("%d connections", conns)},
			start: pair(strict(tcp.Name, nil), tcp.Name, nodeOpts(InProcessTCP()))},
	}...)
	if len(o.TargetServer) > 0 {
		for _, v := range []struct {
			name, mode string
			inProc     bool
		}{{VariantTCPPlugin2P, "plugin", false}, {VariantTCPInProc2P, "in-process", true}} {
			inProc := v.inProc
			vs = append(vs, variantSetup{required: true,
				status: VariantStatus{Name: v.name, Transport: tcp.Name, Mode: v.mode + ", 2 processes",
					Detail: fmt.Sprintf("%d connections; the target node is a process of its own (kvconnect bench --mode target)", conns)},
				start: func(ctx context.Context) (bencher, error) {
					return o.startTwoProcess(ctx, strict(tcp.Name, nil), inProc, nodeOpts())
				}})
		}
	}
	if o.FloorC != "" {
		vs = append(vs, variantSetup{
			status: VariantStatus{Name: VariantFloorC, Transport: "raw", Mode: "C, 2 processes", LatencyOnly: true,
				Detail: "blocking read/write on one loopback TCP connection (floor/pingpong.c)"},
			start: func(context.Context) (bencher, error) { return startFloor(o.FloorC) }})
	}
	// Transports built by others: run them when their plugin is here and
	// comes up with shared-memory / loopback-capable options.
	type alt struct {
		name, transport, key string
		values               []string
	}
	for _, a := range []alt{
		{VariantUCXPlugin, names.UCX, "tls", []string{"sm", "posix,cma"}},
		{VariantEFAPlugin, names.EFA, "provider", []string{"tcp;ofi_rxm"}},
	} {
		v := variantSetup{status: VariantStatus{Name: a.name, Transport: a.transport, Mode: "plugin"}}
		path, _, err := host.FindPlugin(a.transport, o.Config.PluginDir)
		if err != nil {
			v.status.Reason = fmt.Sprintf("plugin binary %s%s not found", host.BinaryPrefix, a.transport)
			vs = append(vs, v)
			continue
		}
		v.status.Detail = path
		v.start = func(ctx context.Context) (bencher, error) {
			var errs []string
			for _, val := range a.values {
				b, err := pair(strict(a.transport, map[string]any{a.key: val}), a.transport, nodeOpts())(ctx)
				if err == nil {
					pb := b.(pairBencher)
					pb.detail = fmt.Sprintf("transports.%s.%s = %q", a.transport, a.key, val)
					return pb, nil
				}
				errs = append(errs, fmt.Sprintf("transports.%s.%s=%q: %s", a.transport, a.key, val, firstLine(err.Error())))
			}
			return nil, errors.New(strings.Join(errs, "; "))
		}
		vs = append(vs, v)
	}
	return append(vs, o.mooncakeVariants(strict(tcp.Name, nil), nodeOpts())...)
}

// mooncakeVariants runs Mooncake's own bench beside kvconnect, when its
// binaries are here.
func (o *SuiteOptions) mooncakeVariants(tcpCfg connector.Config, opts []connector.Option) []variantSetup {
	names := []string{VariantMCtoMC, VariantMCPtoMC, VariantMCtoKV, VariantMCPtoKV, VariantKVtoMC}
	if o.MooncakeBin == "" {
		var vs []variantSetup
		for _, n := range names {
			vs = append(vs, variantSetup{status: VariantStatus{Name: n, Transport: tcp.Name, Mode: "Mooncake TE",
				Reason: "no Mooncake binaries: set KVCONNECT_MOONCAKE_BIN (or --mooncake-bin) to the directory holding transfer_engine_bench"}})
		}
		return vs
	}
	pool := []string{"MC_TCP_ENABLE_CONNECTION_POOL=1"}
	bin := mooncakeBench(o.MooncakeBin)
	againstMooncake := func(env []string) func(ctx context.Context) (bencher, error) {
		return func(ctx context.Context) (bencher, error) {
			t, err := startMooncakeTarget(ctx, o.MooncakeBin, o.BufferSize)
			if err != nil {
				return nil, err
			}
			return &mooncakeInitiator{dir: o.MooncakeBin, env: env, session: t.session, bufSize: o.BufferSize,
				minSecs: mooncakeMinSecs, targetPIDs: func() []int { return []int{t.pid()} }, stop: t.stop}, nil
		}
	}
	// The kvconnect target advertises the address the Mooncake target
	// does (127.0.0.1), like with like: a connection-per-request
	// initiator reuses TIME-WAIT ports only on loopback, so against the
	// Mooncake target on an outward address it would run out of ports
	// (against a kvconnect target it leaves none: it answers the
	// initiator's close with a reset, docs/MOONCAKE.md).
	nodeCfg := tcpCfg
	if nodeCfg.Hostname == "" {
		nodeCfg.Hostname = "127.0.0.1"
	}
	againstNode := func(env []string) func(ctx context.Context) (bencher, error) {
		return func(ctx context.Context) (bencher, error) {
			node, err := StartNode(ctx, nodeCfg, o.BufferSize, opts...)
			if err != nil {
				return nil, err
			}
			return &mooncakeInitiator{dir: o.MooncakeBin, env: env, session: node.C.SessionID(), bufSize: o.BufferSize,
				minSecs: mooncakeMinSecs, targetPIDs: node.PluginPIDs, stop: node.Close}, nil
		}
	}
	nodeToMooncake := func(ctx context.Context) (bencher, error) {
		t, err := startMooncakeTarget(ctx, o.MooncakeBin, o.BufferSize)
		if err != nil {
			return nil, err
		}
		node, peer, err := startNodeOpen(ctx, initiatorConfig(tcpCfg), o.BufferSize, t.session, t.stop, opts...)
		if err != nil {
			return nil, err
		}
		return nodeBencher{node: node, peer: peer, stop: t.stop}, nil
	}
	mode := "Mooncake TE initiator and target processes"
	return []variantSetup{
		{status: VariantStatus{Name: VariantMCtoMC, Transport: tcp.Name, Mode: mode, Detail: bin}, start: againstMooncake(nil)},
		{status: VariantStatus{Name: VariantMCPtoMC, Transport: tcp.Name, Mode: mode, Detail: bin + " with MC_TCP_ENABLE_CONNECTION_POOL=1"}, start: againstMooncake(pool)},
		{status: VariantStatus{Name: VariantMCtoKV, Transport: tcp.Name, Mode: "Mooncake TE initiator, kvconnect target (tcp plugin)", Detail: bin}, start: againstNode(nil)},
		{status: VariantStatus{Name: VariantMCPtoKV, Transport: tcp.Name, Mode: "Mooncake TE initiator, kvconnect target (tcp plugin)", Detail: bin + " with MC_TCP_ENABLE_CONNECTION_POOL=1"}, start: againstNode(pool)},
		{status: VariantStatus{Name: VariantKVtoMC, Transport: tcp.Name, Mode: "kvconnect initiator (tcp plugin), Mooncake TE target", Detail: bin}, start: nodeToMooncake},
	}
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " ..."
	}
	return s
}
