package soak

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/kvconnect/kvconnect/auth"
	"github.com/kvconnect/kvconnect/connector"
	"github.com/kvconnect/kvconnect/internal/netns"
	"github.com/kvconnect/kvconnect/internal/testbin"
)

// Config says how to soak.
type Config struct {
	// Duration is how long faults are injected; the run then waits for
	// every target to recover, and closes everything.
	Duration time.Duration
	// CLI is the kvconnect binary; PluginDir holds the transport plugins;
	// BinDir is where this run's binaries live (a process left running
	// one of them counts as leaked).
	CLI, PluginDir, BinDir string
	// Auth runs every node with a shared secret (and the hostile
	// connections include writes by a node without it).
	Auth bool
	// Seed makes the fault schedule repeatable; 0 picks one.
	Seed uint64
	// Log receives the initiator node's log; nil discards it.
	Log *zap.Logger
}

// Timeouts of the soaked nodes: failures must show within these.
const (
	transferTimeout = 3 * time.Second
	opTimeout       = 2 * time.Second
)

type run struct {
	cfg          Config
	node         *connector.Connector
	targets      []*target
	cli          string
	keys         *auth.Keyring
	hostileStats *hostileStats
	recoverCtx   context.Context
}

// Run soaks and returns the report. The error is for a run that could not
// be set up; what went wrong during the run is in the report.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	if cfg.Seed == 0 {
		cfg.Seed = mrand.Uint64()
	}
	before := take()
	rep := &Report{Duration: cfg.Duration, Seed: cfg.Seed, Auth: cfg.Auth, Started: time.Now()}
	r := &run{cfg: cfg, cli: cfg.CLI, hostileStats: &hostileStats{byKind: map[string]int{}}}

	// The hosts: namespaces on a switch when possible, else loopback.
	hostAddr := "127.0.0.1"
	var hosts []*netns.Host
	var network *netns.Net
	if err := netns.Available(); err != nil {
		rep.Network = "loopback only; link cuts skipped: " + err.Error()
	} else {
		n, err := netns.New()
		if err != nil {
			return nil, err
		}
		network = n
		root, err := n.AddRoot()
		if err != nil {
			n.Close()
			return nil, err
		}
		hostAddr = root.Addr
		for _, name := range []string{"b", "c"} {
			h, err := n.AddHost(name)
			if err != nil {
				n.Close()
				return nil, err
			}
			hosts = append(hosts, h)
		}
		rep.Network = "3 hosts in network namespaces on one bridge (" + n.Subnet() + "): this process's node, and one `kvconnect serve` on each of 2 hosts"
	}
	closeNet := func() {
		if network != nil {
			if err := network.Close(); err != nil {
				rep.Problems = append(rep.Problems, "removing the test network: "+err.Error())
			}
		}
	}

	var secret string
	if cfg.Auth {
		b := make([]byte, 32)
		rand.Read(b)
		secret = base64.StdEncoding.EncodeToString(b)
		r.keys, _ = auth.NewKeyring(auth.Secret(secret))
	}
	env := []string{testbin.QuickExit, "KVCONNECT_TRANSFER_TIMEOUT=" + transferTimeout.String(),
		"KVCONNECT_TRANSPORTS__TCP__OP_TIMEOUT=" + opTimeout.String(), "KVCONNECT_AUTH_SECRET=" + secret}
	region := workersPerTgt * sliceBlocks * blockSize
	for i := 0; i < 2; i++ {
		t := &target{name: string(rune('b' + i)), env: env,
			args: []string{"--alloc", strconv.Itoa(region), "--plugin-dir", cfg.PluginDir, "--log-level", "error"}}
		if hosts != nil {
			t.host, t.addr, t.port = hosts[i], hosts[i].Addr, 17200+i
		} else {
			t.addr, t.port = "127.0.0.1", freePort()
		}
		if err := t.start(cfg.CLI); err != nil {
			for _, s := range r.targets {
				s.kill()
			}
			closeNet()
			return nil, err
		}
		r.targets = append(r.targets, t)
	}
	stopTargets := func() {
		for _, t := range r.targets {
			if err := t.stop(); err != nil {
				rep.Problems = append(rep.Problems, err.Error())
			}
		}
	}

	node, err := connector.New(ctx, connector.Config{Protocol: "tcp", PluginDir: cfg.PluginDir, Hostname: hostAddr,
		TransferTimeout: transferTimeout, ConnectTimeout: 3 * time.Second, AuthSecret: auth.Secret(secret),
		Transports: map[string]map[string]any{"tcp": {"op_timeout": opTimeout.String()}}}, connector.WithLogger(cfg.Log))
	if err != nil {
		stopTargets()
		closeNet()
		return nil, err
	}
	r.node = node

	// Workers.
	cs := &counters{failed: map[string]uint64{}, examples: map[string]string{}}
	workCtx, stopWork := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for ti, t := range r.targets {
		for wi := 0; wi < workersPerTgt; wi++ {
			src, err1 := node.Alloc(ctx, blocksPerOp*blockSize)
			back, err2 := node.Alloc(ctx, blocksPerOp*blockSize)
			if err := errors.Join(err1, err2); err != nil {
				stopWork()
				node.Close()
				stopTargets()
				closeNet()
				return nil, err
			}
			id := ti*workersPerTgt + wi
			w := &worker{id: id, node: node, tgt: t, slice: uint64(wi * sliceBlocks * blockSize), src: src, back: back, c: cs,
				rng: mrand.New(mrand.NewPCG(cfg.Seed, uint64(id)))}
			wg.Add(1)
			go func() { defer wg.Done(); w.run(workCtx) }()
		}
	}

	// Faults.
	recoverCtx, endRecovery := context.WithCancel(ctx)
	r.recoverCtx = recoverCtx
	in := &injector{r: r, rng: mrand.New(mrand.NewPCG(cfg.Seed, 0xfa17)), stats: map[string]*FaultStats{},
		kinds: []string{faultPluginKill, faultTargetPluginKill, faultPeerRestart, faultPeerHang, faultHostile}}
	if network != nil {
		in.kinds = append(in.kinds, faultLinkCut)
	}
	faultCtx, stopFaults := context.WithTimeout(ctx, cfg.Duration)
	injected := make(chan struct{})
	go func() { defer close(injected); in.loop(faultCtx) }()
	<-faultCtx.Done()
	stopFaults()
	<-injected

	// Every target must verify blocks again once the faults stop.
	rep.Recovered = true
	for _, t := range r.targets {
		mark := t.verified.Load()
		deadline := time.Now().Add(30 * time.Second)
		for t.verified.Load() == mark && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if t.verified.Load() == mark {
			rep.Recovered = false
			rep.Problems = append(rep.Problems, fmt.Sprintf("target %s: no block verified within 30 s after the last fault", t.name))
		}
	}
	endRecovery()
	in.pending.Wait()
	stopWork()
	wg.Wait()
	rep.Ended = time.Now()

	if err := node.Close(); err != nil {
		rep.Problems = append(rep.Problems, "closing the initiator: "+err.Error())
	}
	stopTargets()
	closeNet()
	rep.Leaks = leaksSince(before, cfg.BinDir, 15*time.Second)

	rep.Bytes, rep.OpsOK = cs.bytes.Load(), cs.okOps.Load()
	rep.Verified, rep.Corrupted, rep.Discarded = cs.verified.Load(), cs.corrupted.Load(), cs.discarded.Load()
	rep.Failed, rep.FailedExamples, rep.CorruptDetails = cs.failed, cs.examples, cs.corrupt
	for _, k := range in.kinds {
		rep.Faults = append(rep.Faults, *in.stat(k))
	}
	rep.Rounds = in.rounds
	rep.Hostile = r.hostileStats.byKind
	rep.HostileLanded = r.hostileStats.landed.Load()
	return rep, nil
}

func freePort() int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
