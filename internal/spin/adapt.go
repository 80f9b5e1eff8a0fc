package spin

import (
	"sync/atomic"
	"time"
)

// Adaptive spin budgets. A fixed budget is bistable on a busy machine:
// while both sides catch each other spinning no one sleeps, but once a
// wake-up is slow (the machine is loaded) the host's spin expires before
// the plugin answers, the plugin's before the host submits again, and
// every batch pays two futex wake-ups from then on. Learning how long the
// waits really are, and spinning a little longer than that, brings the
// fast mode back. A wait longer than the cap is not spun for at all: on
// an oversubscribed machine the waits grow because the processes that
// would end them wait for a processor, and spinning would take it.
const minSpin = 20 * time.Microsecond

// A spinner that finds the clock jumped by more than preemptedAfter
// between two looks was descheduled. An occasional preemption is noise;
// when more than a quarter of the last spinWindow spins were preempted
// the machine has more runnable threads than processors, and spinning
// only takes a processor from the thread that would end the wait: then
// only one wait in probeEvery spins (to notice when the load passes).
const (
	preemptedAfter = 30 * time.Microsecond
	spinWindow     = 64
	probeEvery     = 16
)

// Adapt learns a typical wait (an exponentially weighted mean of the
// waits it is told about) and turns it into a spin budget of at most
// Max. It is safe for concurrent use; concurrent updates may lose one
// another, which only makes it learn a little slower.
type Adapt struct {
	mean atomic.Int64 // ns
	// Spins and the preempted ones in the current window; contended
	// says the last full window had too many preempted; calls counts
	// Budget calls, for probing.
	spins, preempts, calls atomic.Int32
	contended              atomic.Bool
	// Max caps the budget; waits longer than it get minSpin/2.
	Max time.Duration
	// Fixed, when set (> 0, or < 0 for no spinning), replaces the
	// learned budget (the tuning knobs).
	Fixed time.Duration
}

// Observe records one wait.
func (a *Adapt) Observe(d time.Duration) {
	if d < 0 {
		return
	}
	old := a.mean.Load()
	if old == 0 {
		a.mean.Store(int64(d))
		return
	}
	a.mean.Store(old + (int64(d)-old)/8)
}

// Mean is the learned wait.
func (a *Adapt) Mean() time.Duration { return time.Duration(a.mean.Load()) }

// Budget is how long to spin for a wait expected to be like the ones
// observed: twice the mean, at least minSpin, and nothing but minSpin/2
// when the mean is beyond Max (sleeping costs less there).
func (a *Adapt) Budget() time.Duration {
	switch {
	case a.Fixed > 0:
		return a.Fixed
	case a.Fixed < 0:
		return 0
	case a.contended.Load() && a.calls.Add(1)%probeEvery != 0:
		return 0
	}
	m := a.Mean()
	switch {
	case m > a.Max:
		return minSpin / 2
	case 2*m < minSpin:
		return minSpin
	}
	return min(2*m, a.Max)
}

// NewAdapt returns an Adapt with budgets up to max, which environment
// variable env may fix: a Go duration, or 0 for no spinning.
func NewAdapt(env string, max time.Duration) *Adapt {
	a := &Adapt{Max: max}
	if d := For(env, -1); d > 0 {
		a.Fixed = d
	} else if d == 0 {
		a.Fixed = -1
	}
	return a
}

// Window is what the current window of spins holds so far: how many
// ended before their budget, and how many of those because the spinner
// was descheduled (diagnostics and tests).
func (a *Adapt) Window() (spins, preempted int32) {
	return a.spins.Load(), a.preempts.Load()
}

// spun records the end of one spin, preempted or not, and updates
// contended at the end of each window.
func (a *Adapt) spun(preempted bool) {
	if preempted {
		a.preempts.Add(1)
	}
	if a.spins.Add(1) < spinWindow {
		return
	}
	a.contended.Store(a.preempts.Load() > spinWindow/4)
	a.spins.Store(0)
	a.preempts.Store(0)
}
