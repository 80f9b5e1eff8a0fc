package soak

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"syscall"
	"time"
)

// A fault kind, injected at random.
const (
	faultPluginKill       = "plugin kill (initiator)"
	faultTargetPluginKill = "plugin kill (target)"
	faultPeerRestart      = "peer restart (SIGKILL, same address)"
	faultPeerHang         = "peer hang (SIGSTOP 2-4 s)"
	faultLinkCut          = "link cut (ip link set down 1-4 s)"
	faultHostile          = "hostile connections"
)

// FaultStats is what happened for one kind of fault.
type FaultStats struct {
	Kind     string          `json:"kind"`
	Count    int             `json:"count"`
	Recovery []time.Duration `json:"-"` // from the fault's end to the next verified blocks on the affected target
	Failed   []string        `json:"failed,omitempty"`
	// Unrecovered counts faults after which no block was verified again
	// before the run ended.
	Unrecovered int `json:"unrecovered"`
}

// P50 and Max summarise Recovery.
func (f *FaultStats) P50() time.Duration { return pct(f.Recovery, 50) }
func (f *FaultStats) Max() time.Duration { return pct(f.Recovery, 100) }

func pct(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := (len(s) - 1) * p / 100
	return s[i]
}

// injector injects faults until ctx ends.
type injector struct {
	r       *run
	rng     *rand.Rand
	kinds   []string
	mu      sync.Mutex
	stats   map[string]*FaultStats
	rounds  int            // rounds in which every kind was injected
	pending sync.WaitGroup // recovery watchers
}

func (in *injector) stat(kind string) *FaultStats {
	in.mu.Lock()
	defer in.mu.Unlock()
	s := in.stats[kind]
	if s == nil {
		s = &FaultStats{Kind: kind}
		in.stats[kind] = s
	}
	return s
}

// loop injects one fault every 1-3 s, the kinds in a shuffled order per
// round so that each kind comes up.
func (in *injector) loop(ctx context.Context) {
	for ctx.Err() == nil {
		order := append([]string(nil), in.kinds...)
		in.rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for _, kind := range order {
			sleep(ctx, time.Duration(1000+in.rng.IntN(2000))*time.Millisecond)
			if ctx.Err() != nil {
				return
			}
			in.inject(ctx, kind)
		}
		in.mu.Lock()
		in.rounds++
		in.mu.Unlock()
	}
}

func (in *injector) inject(ctx context.Context, kind string) {
	r := in.r
	tgt := r.targets[in.rng.IntN(len(r.targets))]
	st := in.stat(kind)
	in.mu.Lock()
	st.Count++
	in.mu.Unlock()
	var err error
	switch kind {
	case faultPluginKill:
		if pid := r.node.Status().PluginPID; pid > 0 {
			err = syscall.Kill(pid, syscall.SIGKILL)
		} else {
			err = fmt.Errorf("no plugin pid")
		}
		tgt = nil // every target is affected
	case faultTargetPluginKill:
		if pid := tgt.plugin(); pid > 0 {
			err = syscall.Kill(pid, syscall.SIGKILL)
		} else {
			err = fmt.Errorf("target %s has no plugin process", tgt.name)
		}
	case faultPeerRestart:
		tgt.epoch.Add(1)
		tgt.kill()
		err = tgt.start(r.cli)
		tgt.epoch.Add(1)
	case faultPeerHang:
		pg := tgt.pgid()
		syscall.Kill(-pg, syscall.SIGSTOP)
		sleep(ctx, time.Duration(2000+in.rng.IntN(2000))*time.Millisecond)
		syscall.Kill(-pg, syscall.SIGCONT)
	case faultLinkCut:
		if err = tgt.host.LinkDown(); err == nil {
			sleep(ctx, time.Duration(1000+in.rng.IntN(3000))*time.Millisecond)
			err = tgt.host.LinkUp()
		}
	case faultHostile:
		err = r.hostile(ctx, in.rng)
		tgt = nil
	}
	if err != nil {
		in.mu.Lock()
		if len(st.Failed) < 8 {
			st.Failed = append(st.Failed, err.Error())
		}
		in.mu.Unlock()
	}
	in.watchRecovery(in.r.recoverCtx, st, tgt)
}

// watchRecovery records how long after now blocks are verified again on
// tgt (nil: on every target).
func (in *injector) watchRecovery(ctx context.Context, st *FaultStats, tgt *target) {
	targets := in.r.targets
	if tgt != nil {
		targets = []*target{tgt}
	}
	start := time.Now()
	marks := make([]uint64, len(targets))
	for i, t := range targets {
		marks[i] = t.verified.Load()
	}
	in.pending.Add(1)
	go func() {
		defer in.pending.Done()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			done := true
			for i, t := range targets {
				if t.verified.Load() == marks[i] {
					done = false
				}
			}
			if done {
				in.mu.Lock()
				st.Recovery = append(st.Recovery, time.Since(start))
				in.mu.Unlock()
				return
			}
			select {
			case <-tick.C:
			case <-ctx.Done():
				in.mu.Lock()
				st.Unrecovered++
				in.mu.Unlock()
				return
			}
		}
	}()
}
