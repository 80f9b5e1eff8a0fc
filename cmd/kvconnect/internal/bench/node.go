package bench

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvconnect/kvconnect/connector"
	"github.com/kvconnect/kvconnect/plugins/host"
	"github.com/kvconnect/kvconnect/transports/tcp"
	"github.com/kvconnect/kvconnect/units"
)

// InProcessTCP is the option that runs the tcp transport inside this
// process instead of as a plugin.
func InProcessTCP() connector.Option {
	return connector.WithInProcess(tcp.Name)
}

// Node is a kvconnect node with one registered buffer.
type Node struct {
	C   *connector.Connector
	Buf *connector.Region
}

// startNodeOpen starts a node and opens session on it; on failure it
// closes the node and calls stop (the target's), so the caller has
// nothing left to clean up.
func startNodeOpen(ctx context.Context, cfg connector.Config, bufSize int, session string, stop func() error, opts ...connector.Option) (*Node, *connector.Peer, error) {
	node, err := StartNode(ctx, cfg, bufSize, opts...)
	if err != nil {
		stop()
		return nil, nil, err
	}
	peer, err := node.C.Open(ctx, session)
	if err != nil {
		node.Close()
		stop()
		return nil, nil, err
	}
	return node, peer, nil
}

// StartNode starts a node with cfg and allocates a buffer of bufSize bytes.
func StartNode(ctx context.Context, cfg connector.Config, bufSize int, opts ...connector.Option) (*Node, error) {
	if bufSize <= 0 || bufSize > connector.MaxRegionSize {
		return nil, fmt.Errorf("--buffer-size %d: must be between 1 byte and %s", bufSize, units.FormatSize(connector.MaxRegionSize))
	}
	c, err := connector.New(ctx, cfg, opts...)
	if err != nil {
		return nil, err
	}
	buf, err := c.Alloc(ctx, bufSize)
	if err != nil {
		c.Close()
		return nil, err
	}
	return &Node{C: c, Buf: buf}, nil
}

// Close stops the node.
func (n *Node) Close() error {
	if n == nil || n.C == nil {
		return nil
	}
	return n.C.Close()
}

// ringOf is what the ring of c's transport named transport counted so
// far, nil without one.
func ringOf(c *connector.Connector, transport string) *host.RingStats {
	for _, t := range c.Status().Transports {
		if t.Name == transport {
			return t.Ring
		}
	}
	return nil
}

// pluginRingOf is what the plugin's side of that ring counted so far,
// nil when it cannot tell (no ring, an older plugin, a call that
// failed): the bench line then shows the host's side alone.
func pluginRingOf(ctx context.Context, c *connector.Connector, transport string) *host.PluginRingStats {
	ctx, cancel := context.WithTimeout(ctx, pluginRingAsk)
	defer cancel()
	st, err := c.PluginRingStats(ctx, transport)
	if err != nil {
		return nil
	}
	return &st
}

// pluginRingAsk bounds the call for the plugin's ring counts.
const pluginRingAsk = 2 * time.Second

// PluginPIDs are the node's transport plugin processes.
func (n *Node) PluginPIDs() []int {
	var pids []int
	for _, t := range n.C.Status().Transports {
		if t.PluginPID > 0 {
			pids = append(pids, t.PluginPID)
		}
	}
	return pids
}

// Pair is two nodes in this process, the initiator with the target opened:
// what loopback runs and the suite use. Each node's transport is still its
// own plugin process unless the in-process option is given.
type Pair struct {
	Target    *Node
	Initiator *Node
	Peer      *connector.Peer
}

// initiatorConfig is cfg for the second node of a pair on the same host:
// ports that the first node took are left for the kernel to pick.
func initiatorConfig(cfg connector.Config) connector.Config {
	cfg.RPCPort = 0
	cfg = freePortMetricsAddress(cfg)
	if len(cfg.Transports) > 0 {
		ts := make(map[string]map[string]any, len(cfg.Transports))
		for name, o := range cfg.Transports {
			o = maps.Clone(o)
			if _, ok := o["port"]; ok {
				o["port"] = 0
			}
			ts[name] = o
		}
		cfg.Transports = ts
	}
	return cfg
}

// StartPair starts a target node and an initiator node with cfg, each
// with a buffer of bufSize bytes, and opens the target from the initiator.
func StartPair(ctx context.Context, cfg connector.Config, bufSize int, opts ...connector.Option) (*Pair, error) {
	t, err := StartNode(ctx, cfg, bufSize, opts...)
	if err != nil {
		return nil, fmt.Errorf("target node: %w", err)
	}
	i, err := StartNode(ctx, initiatorConfig(cfg), bufSize, opts...)
	if err != nil {
		t.Close()
		return nil, fmt.Errorf("initiator node: %w", err)
	}
	p, err := i.C.Open(ctx, t.C.SessionID())
	if err != nil {
		i.Close()
		t.Close()
		return nil, err
	}
	return &Pair{Target: t, Initiator: i, Peer: p}, nil
}

// PluginPIDs are both nodes' plugin processes.
func (p *Pair) PluginPIDs() []int { return append(p.Initiator.PluginPIDs(), p.Target.PluginPIDs()...) }

// Close stops both nodes.
func (p *Pair) Close() error {
	if p == nil {
		return nil
	}
	return errors.Join(p.Initiator.Close(), p.Target.Close())
}

// Mode is "plugin" or "in-process", for the transport the peer uses.
func (p *Pair) Mode() string {
	for _, t := range p.Initiator.C.Status().Transports {
		if t.Name == p.Peer.Transport() {
			return t.Mode
		}
	}
	return ""
}

// RunInput is what Run needs.
type RunInput struct {
	Initiator *Node
	Peer      *connector.Peer
	Workload  Workload
	// PIDs are the plugin processes whose CPU time is counted.
	PIDs []int
	// Progress shows a live line (nil: quiet).
	Progress *Progress
	// Label prefixes the progress line.
	Label string
}

// counters are a run's shared progress.
type counters struct {
	bytes   atomic.Uint64
	ops     atomic.Uint64
	batches atomic.Uint64
}

func (c *counters) reset() {
	c.bytes.Store(0)
	c.ops.Store(0)
	c.batches.Store(0)
}

// Run drives in.Workload from the initiator against the peer's first
// region and measures it. Thread t's ops cycle through its own share of
// the blocks (see layout), at the same offsets on both sides. Run returns
// the result and the blocks the run moved, for verification.
func Run(ctx context.Context, in RunInput) (Result, Blocks, error) {
	w := in.Workload
	if err := w.Validate(); err != nil {
		return Result{}, nil, err
	}
	remote := in.Peer.Regions()
	if len(remote) == 0 {
		return Result{}, nil, fmt.Errorf("peer %s publishes no buffer", in.Peer.Session())
	}
	rr := remote[0]
	local := in.Initiator.Buf
	n := min(uint64(local.Len()), rr.Len) / uint64(w.BlockSize)
	if n == 0 {
		return Result{}, nil, fmt.Errorf("--block-size %s is larger than the buffers (local %s, peer %s): raise --buffer-size",
			units.FormatSize(uint64(w.BlockSize)), units.FormatSize(uint64(local.Len())), units.FormatSize(rr.Len))
	}
	lay := newLayout(int(n), w.Threads)
	issued := make([]uint64, w.Threads) // ops per thread, warmup included
	c := in.Initiator.C
	var cnt counters
	phase := func(d time.Duration, lat [][]time.Duration) error {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		deadline := time.Now().Add(d)
		var wg sync.WaitGroup
		var once sync.Once
		var firstErr error
		for t := range w.Threads {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ops := make([]connector.Op, w.BatchSize)
				bs := uint64(w.BlockSize)
				for time.Now().Before(deadline) && ctx.Err() == nil {
					for i := range ops {
						off := lay.block(t, issued[t]+uint64(i)) * bs
						ops[i] = connector.Op{Kind: w.Op.kind(), LocalRegion: local.ID(), LocalOffset: off,
							RemoteRegion: rr.ID, RemoteOffset: off, Length: bs}
					}
					issued[t] += uint64(w.BatchSize)
					start := time.Now()
					// Each thread keeps one batch in flight: submit and
					// wait in one call, as a synchronous caller does.
					err := c.Transfer(ctx, in.Peer, ops...)
					if err != nil {
						once.Do(func() { firstErr = err; cancel() })
						return
					}
					if lat != nil {
						lat[t] = append(lat[t], time.Since(start))
					}
					cnt.bytes.Add(uint64(w.BatchSize) * bs)
					cnt.ops.Add(uint64(w.BatchSize))
					cnt.batches.Add(1)
				}
			}()
		}
		wg.Wait()
		if firstErr != nil {
			return fmt.Errorf("%s to %s: %w", w, in.Peer.Session(), firstErr)
		}
		return ctx.Err()
	}
	if w.Warmup > 0 {
		in.Progress.Set("%swarming up for %v", in.Label, w.Warmup)
		if err := phase(w.Warmup, nil); err != nil {
			return Result{}, nil, err
		}
	}
	warm := cnt.bytes.Load()
	cnt.reset()
	ringBefore := ringOf(c, in.Peer.Transport())
	pluginBefore := pluginRingOf(ctx, c, in.Peer.Transport())
	before, err := snapshotCPU(in.PIDs)
	if err != nil {
		return Result{}, nil, err
	}
	lat := make([][]time.Duration, w.Threads)
	start := time.Now()
	stop := in.Progress.ticker(250*time.Millisecond, func() {
		el := time.Since(start)
		in.Progress.Set("%s%5.1fs/%v  %7.3f GB/s  %9.0f ops/s  %d batches", in.Label, el.Seconds(), w.Duration,
			float64(cnt.bytes.Load())/el.Seconds()/1e9, float64(cnt.ops.Load())/el.Seconds(), cnt.batches.Load())
	})
	err = phase(w.Duration, lat)
	elapsed := time.Since(start)
	stop()
	in.Progress.Clear()
	if err != nil {
		return Result{}, nil, err
	}
	after, err := snapshotCPU(in.PIDs)
	if err != nil {
		return Result{}, nil, err
	}
	ringAfter := ringOf(c, in.Peer.Transport())
	pluginAfter := pluginRingOf(ctx, c, in.Peer.Transport())
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	r := Result{Transport: in.Peer.Transport(), Peer: in.Peer.Session(),
		Bytes: cnt.bytes.Load(), Ops: cnt.ops.Load(), Batches: cnt.batches.Load(), PluginPIDs: in.PIDs, WarmupBytes: warm}
	for _, t := range c.Status().Transports {
		if t.Name == r.Transport {
			r.Mode = t.Mode
		}
	}
	r.Ring = ringSince(ringBefore, ringAfter)
	r.Ring.addPlugin(pluginBefore, pluginAfter)
	r.HostCPU, r.PluginCPU = after.since(before)
	r.HostSwitches, r.PluginSwitches = after.switchesSince(before)
	hw, pw, idle := after.waitSince(before)
	r.HostRunDelay, r.PluginRunDelay, r.VCPUIdle, r.hostWaitKnown = hw.Seconds(), pw.Seconds(), idle, true
	r.fill(w, elapsed, all)
	r.lat = all
	return r, lay.touched(issued), nil
}
