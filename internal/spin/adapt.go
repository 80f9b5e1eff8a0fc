package spin

import (
	"sync/atomic"
	"time"
)

// Adaptive spin budgets. A spinner either catches what it waits for or
// sleeps and has to be woken, and on a small machine a sleeping side
// slows the other down: with the host's poller asleep both processors
// can go idle, every wake-up in the chain (host to plugin, plugin to the
// peer and back) lands on a halted one, the plugin's answer comes later,
// and the host's next spin misses it too. Budgets sized from the mean
// wait (twice it, capped; the first design) made that a trap: one slow
// phase raised the mean past the cap, budgets collapsed, and both sides
// stayed asleep, one op in two or three paying those wake-ups (4 KiB
// single op through the tcp plugin, Intel Xeon VM, 2 vCPUs: a p50 of
// 18–113 µs from run to run against 14–16 µs with the host's spin fixed
// at 100 µs; docs/DATAPATH-ROUNDS.md, eighth round).
//
// What decides whether spinning pays is how often a spin catches its
// wait, and that has to be measured on spins that could have: a wait
// measured while this side slept says little about a spin, because the
// sleep itself made it longer. So an Adapt counts the outcome of the
// spins that tried (a budget of at least half of Max): while at least
// half of the recent ones caught their wait, the budget is all of Max (a
// spin costs its budget only when it misses); when fewer did (waits
// longer than Max: large batches, or a machine too busy to answer) it
// hardly spins, but one wait in probeEvery is tried with all of Max, so
// it notices when spinning would pay again.
const minSpin = 20 * time.Microsecond

// A spinner that finds the clock jumped by more than preemptedAfter
// between two looks was descheduled: it stops (what it waits for may
// have come meanwhile), and its spin is no try. Whether spinning pays at
// all on a machine and load is a Chooser's question (choose.go), not
// this one's.
const preemptedAfter = 30 * time.Microsecond

// probeEvery: while few tries catch, one wait in probeEvery is a try.
const probeEvery = 16

// catchScale is the fixed-point one of Adapt's share of tries that
// caught their wait; catchShift sets how fast it follows (each try moves
// it 1/16 of the way).
const (
	catchScale = 1 << 16
	catchShift = 4
)

// Adapt sizes spin budgets from how often spins of up to Max catch what
// they wait for (see above). It also keeps the mean of the waits it is
// told about, for diagnostics. It is safe for concurrent use; concurrent
// updates may lose one another, which only makes it learn a little
// slower.
type Adapt struct {
	mean atomic.Int64 // ns
	// caught is the share of recent tries (spins of at least Max/2 not
	// preempted) that caught their wait, scaled by catchScale; tried
	// says there was one (before it, budgets are Max).
	caught atomic.Int32
	tried  atomic.Bool
	// calls counts Budget calls, for probing.
	calls atomic.Int32
	// Totals, for Stats.
	totTries, totCaught, totPreempted, totYields atomic.Int64
	// Max caps the budget.
	Max time.Duration
	// Fixed, when set (> 0, or < 0 for no spinning), replaces the
	// learned budget (the tuning knobs).
	Fixed time.Duration
	// Choose, when set, decides whether to spin at all (the budget is 0
	// while it picks sleeping); the caller tells it how long each wait
	// took with Took.
	Choose *Chooser
}

// Took tells a's Chooser, if any, how long one wait took as the caller
// saw it (to the moment it noticed the end, sleeping or not).
func (a *Adapt) Took(d time.Duration) {
	if a.Choose != nil {
		a.Choose.Observe(d)
	}
}

// Observe records one wait, for Mean.
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

// Mean is the mean wait observed (diagnostics).
func (a *Adapt) Mean() time.Duration { return time.Duration(a.mean.Load()) }

// CatchShare is the share of recent tries that caught their wait, 0 to 1
// (1 before any try; diagnostics).
func (a *Adapt) CatchShare() float64 {
	if !a.tried.Load() {
		return 1
	}
	return float64(a.caught.Load()) / catchScale
}

// Budget is how long to spin for the next wait: a fixed budget if one is
// set; with a Chooser, Max while it picks spinning and 0 while it picks
// sleeping; else Max while at least half of the recent tries caught
// their wait (or none was made yet), minSpin/2 otherwise but Max for one
// wait in probeEvery.
func (a *Adapt) Budget() time.Duration {
	switch {
	case a.Fixed > 0:
		return a.Fixed
	case a.Fixed < 0:
		return 0
	case a.Choose != nil:
		if a.Choose.Spinning() {
			return a.Max
		}
		return 0
	case a.tried.Load() && a.caught.Load() < catchScale/2 && a.calls.Add(1)%probeEvery != 0:
		return min(minSpin/2, a.Max)
	}
	return a.Max
}

// NewAdapt returns an Adapt with budgets up to max, which environment
// variable env may fix: a Go duration, or 0 for no spinning.
func NewAdapt(env string, max time.Duration) *Adapt {
	a := &Adapt{Max: max}
	a.fix(env)
	return a
}

// NewChoosing is NewAdapt with a Chooser deciding whether to spin at all
// (unless env fixes the budget).
func NewChoosing(env string, max time.Duration) *Adapt {
	a := &Adapt{Max: max, Choose: &Chooser{}}
	a.fix(env)
	return a
}

func (a *Adapt) fix(env string) {
	if d := For(env, -1); d > 0 {
		a.Fixed = d
	} else if d == 0 {
		a.Fixed = -1
	}
}

// Stats is what an Adapt saw so far, for diagnostics: the tries, how
// many caught their wait, the spins that were preempted, and how often
// its spinners yielded their processor.
type Stats struct {
	Tries, Caught, Preempted, Yields int64
	CatchShare                       float64
}

// Stats reports what a saw so far.
func (a *Adapt) Stats() Stats {
	return Stats{Tries: a.totTries.Load(), Caught: a.totCaught.Load(), Preempted: a.totPreempted.Load(), Yields: a.totYields.Load(), CatchShare: a.CatchShare()}
}

// preempted records a spin that was descheduled.
func (a *Adapt) preempted() { a.totPreempted.Add(1) }

// try records the outcome of one try (a spin of at least Max/2 that was
// not preempted): whether it caught its wait.
func (a *Adapt) try(caught bool) {
	var v int32
	a.totTries.Add(1)
	if caught {
		v = catchScale
		a.totCaught.Add(1)
	}
	c := a.caught.Load()
	if !a.tried.Swap(true) {
		c = catchScale // the first try moves it from all caught
	}
	a.caught.Store(c + (v-c)>>catchShift)
}
