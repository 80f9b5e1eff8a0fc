// Package spin holds bounded busy waits and the budgets that size them:
// a Spinner waits for something another thread or process will do
// without sleeping, for a while; an Adapt sizes its budget from how often
// such spins catch their wait, and a Chooser measures whether spinning
// pays at all on this machine and load (adapt.go, choose.go).
// The shared-memory rings (internal/ring's users) and the tcp
// transport's lone small op use them.
package spin

import (
	"context"
	"os"
	"runtime"
	"time"
)

// Spinner is a bounded busy wait: Spin reports whether to keep spinning,
// yielding the processor now and then so other goroutines run. When it
// finds it was descheduled it stops (unless KeepOnPreempt). Its Adapt,
// if any, learns how many spins were: call Done after the loop. The zero
// value is unusable; make one with New or Until.
type Spinner struct {
	until     time.Time
	last      time.Time
	a         *Adapt
	n         int
	yields    int    // times it yielded its processor
	preempted bool   // descheduled: the clock jumped preemptedAfter
	try       bool   // a try: its budget was at least a.Max/2 (adapt.go)
	locked    bool   // never yield (Locked)
	keepOn    bool   // spin on when descheduled (KeepOnPreempt)
	yield     func() // runtime.Gosched but in tests
	// yieldEvery, when set (YieldEvery), spaces yields by time, not by
	// checks: the next is due at yieldAt.
	yieldEvery time.Duration
	yieldAt    time.Time
}

// Locked makes the spinner never yield the processor: its goroutine is
// locked to its OS thread (see WithoutYield).
func (sp *Spinner) Locked() { sp.locked = true }

// KeepOnPreempt makes the spinner go on to its budget when it finds it
// was descheduled, rather than stop. Whoever ran meanwhile has had the
// processor; what the spinner waits for may be about to come, and
// sleeping now would cost a wake-up then. The preemption still counts
// (its Adapt learns of it, and the spin is no try). For a spinner whose
// budget is bounded from the start of what it waits for, as the host's
// poller's is from its batch's submission.
func (sp *Spinner) KeepOnPreempt() { sp.keepOn = true }

func (sp *Spinner) doYield() {
	if sp.locked {
		return
	}
	sp.yields++
	if sp.yield != nil {
		sp.yield()
		return
	}
	runtime.Gosched()
}

// New spins for d; a (may be nil) learns of preemptions and, if d is a
// try (at least a.Max/2), whether the spin caught its wait.
func New(d time.Duration, a *Adapt) Spinner {
	return Until(time.Now().Add(d), a)
}

// Until spins until t; a (may be nil) learns of preemptions and, if the
// time left is a try (at least a.Max/2), whether the spin caught its
// wait.
func Until(t time.Time, a *Adapt) Spinner {
	now := time.Now()
	return Spinner{until: t, last: now, a: a, try: a != nil && a.Max > 0 && t.Sub(now) >= a.Max/2}
}

// YieldEvery makes the spinner yield its processor once per d of
// spinning (the first after d) instead of every 2048 checks. A yield is
// not free: runtime.Gosched wakes another thread of the process if a
// processor idles (wakep), and on a small machine that thread takes the
// vCPU the other side of the wait needs. A spinner that usually waits
// longer than a few microseconds, like the plugin's worker waiting for
// its host's next batch while the host's caller does its own work in
// between, spaces its yields by time (docs/DATAPATH-ROUNDS.md,
// thirty-first round).
func (sp *Spinner) YieldEvery(d time.Duration) {
	sp.yieldEvery = d
	sp.yieldAt = sp.last.Add(d)
}

// Spin reports whether the spin budget lasts; call it once per check.
// It reads the clock every 128 checks and yields the processor to other
// goroutines every 2048 (a few microseconds of checking: a yield costs
// about a microsecond itself), or as YieldEvery says.
func (sp *Spinner) Spin() bool {
	sp.n++
	if sp.n%128 != 0 {
		return true
	}
	if sp.yieldDue(2048) {
		sp.doYield()
	}
	return sp.lasts()
}

// yieldDue reports whether the spinner yields at this look at the clock:
// every checks checks, or as YieldEvery says.
func (sp *Spinner) yieldDue(checks int) bool {
	if sp.yieldEvery <= 0 {
		return sp.n%checks == 0
	}
	if sp.last.Before(sp.yieldAt) {
		return false
	}
	sp.yieldAt = sp.last.Add(sp.yieldEvery)
	return true
}

// SpinSlow is Spin for loops whose every check is costly (a system
// call, say): it reads the clock at each check and yields the processor
// every 16, or as YieldEvery says.
func (sp *Spinner) SpinSlow() bool {
	sp.n++
	if sp.yieldDue(16) {
		sp.doYield()
	}
	return sp.lasts()
}

// lasts reads the clock: false once the budget is spent, or when the
// clock jumped since the last look (the spinner was descheduled).
func (sp *Spinner) lasts() bool {
	now := time.Now()
	if now.Sub(sp.last) > preemptedAfter {
		sp.preempted = true
		if !sp.keepOn {
			return false
		}
	}
	sp.last = now
	return now.Before(sp.until)
}

// Done ends a spin that had a budget, telling its Adapt how often it
// yielded, whether it was preempted and, for a try, whether it caught
// its wait: ended before its budget, not descheduled.
func (sp *Spinner) Done() {
	if sp.a == nil {
		return
	}
	if sp.yields > 0 {
		sp.a.totYields.Add(int64(sp.yields))
	}
	switch {
	case sp.preempted:
		sp.a.preempted()
	case sp.try:
		sp.a.try(sp.until.After(sp.last))
	}
}

// For is the spin budget named by environment variable env (a Go
// duration, "0" for none), or def when it is unset or malformed: a
// tuning knob for measurements (docs/DATAPATH.md).
func For(env string, def time.Duration) time.Duration {
	v := os.Getenv(env)
	if v == "0" {
		return 0
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return d
	}
	return def
}

type withoutYieldKey struct{}

// WithoutYield marks ctx: the goroutine that waits under it is locked to
// its OS thread (a call from C through cgo, as the C library's and the
// Python engine's are). There runtime.Gosched does not yield: the
// scheduler hands the thread's processor to another thread, which finds
// the goroutine can only run on its own thread and hands it back, two
// thread wake-ups per yield (one 4 KiB transfer_sync_write from Python,
// Intel Xeon VM: 112 µs p50 with the yields, 20 µs without). Spinners
// and pollers waiting under such a context do not yield.
func WithoutYield(ctx context.Context) context.Context {
	return context.WithValue(ctx, withoutYieldKey{}, true)
}

// MayYield reports whether a waiter under ctx may yield its processor
// (ctx does not carry WithoutYield's mark).
func MayYield(ctx context.Context) bool {
	locked, _ := ctx.Value(withoutYieldKey{}).(bool)
	return !locked
}
