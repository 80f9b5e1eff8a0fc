package spin

import (
	"slices"
	"sync"
	"time"
)

// Whether spinning pays is not a property of the code but of the
// machine and its load, and no signal a spinner sees on its own tells
// the cases apart. On a quiet 2-vCPU VM a spinning host keeps one vCPU
// busy, its plugin and the peer share the other, no wake-up lands on a
// halted vCPU, and a 4 KiB op through the tcp plugin takes 14 µs; if the
// host sleeps instead, the scheduler packs every process onto the one
// vCPU that is awake (waking a halted one costs tens of microseconds
// there), the host's next spin is preempted by its own plugin, and the
// op takes 100 µs or more. With two busy loops beside it the same holds
// (17 against 66–81 µs). With six, spinning only takes the processor the
// other side needs: 122–131 µs spinning against 26–52 µs asleep. A
// spinner is preempted in the first and the last case alike.
//
// So a Chooser measures: it runs the waits in epochs of chooseEpoch,
// each either spinning (the Adapt's budget) or sleeping at once, and
// keeps the way whose waits the caller saw end sooner. It compares the
// medians of epochs, not means: busy neighbours make the waits' tail
// milliseconds long, and a mean of it is noise. The first chooseSettle
// waits of an epoch are not counted: a change of way takes a few waits
// to show (the scheduler moves the processes). The other way is tried
// every exploreMin epochs after a switch, backing off to every
// exploreMax while it keeps losing, and a switch needs it to be clearly
// faster (switchBelow) than the way kept has been lately: the median of
// its last keptEpochs epochs, not its last one alone. On a 2-vCPU VM one
// epoch of spinning in three or four can be slow (150 µs against 45:
// the scheduler moved a process onto the spinner's vCPU for a while);
// comparing against that one epoch made the Chooser switch to sleeping,
// which is slower there (100–150 µs), and stay for up to a second or
// more, because a try of spinning from the packed placement sleeping
// leaves looks slow too (docs/DATAPATH-ROUNDS.md, twelfth round). After a
// switch the way's record starts from the epoch that won it.
const (
	chooseEpoch  = 64
	chooseSettle = 16
	exploreMin   = 4
	exploreMax   = 64
	keptEpochs   = 3
)

// switchBelow is how much faster (the ratio of epoch medians) the other
// way must have been for a Chooser to take it.
const switchBelow = 0.85

// Chooser picks, epoch by epoch, whether waits spin or sleep, keeping
// the way whose waits end sooner (see above). The zero value spins
// first. It is safe for concurrent use (a mutex; one Spinning and one
// Observe per wait).
type Chooser struct {
	mu      sync.Mutex
	sleep   bool // the way kept: sleep (true) or spin
	explore bool // this epoch tries the other way
	n       int  // waits observed in this epoch
	waits   [chooseEpoch - chooseSettle]time.Duration
	kept    time.Duration // the median of the last epoch of the way kept
	// recent holds the medians of the way kept's last epochs, oldest
	// first (nrecent of them, up to keptEpochs).
	recent  [keptEpochs]time.Duration
	nrecent int
	epochs  int // epochs since the last try of the other way
	every   int // try the other way every this many epochs
	// switches counts changes of the way kept (diagnostics).
	switches int
}

// Spinning reports whether the current wait should spin.
func (c *Chooser) Spinning() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sleep == c.explore
}

// Observe records how long one wait took, as its caller saw it (from the
// start of what it waited for until it noticed the end), for the epoch
// in progress.
func (c *Chooser) Observe(d time.Duration) {
	if d < 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n >= chooseSettle {
		c.waits[c.n-chooseSettle] = d
	}
	if c.n++; c.n < chooseEpoch {
		return
	}
	c.n = 0
	slices.Sort(c.waits[:])
	median := c.waits[len(c.waits)/2]
	if c.every == 0 {
		c.every = exploreMin
	}
	if c.explore {
		c.explore, c.epochs = false, 0
		if ref := c.lately(); ref > 0 && float64(median) < switchBelow*float64(ref) {
			c.sleep, c.kept, c.every = !c.sleep, median, exploreMin
			c.recent[0], c.nrecent = median, 1
			c.switches++
			return
		}
		c.every = min(2*c.every, exploreMax)
		return
	}
	c.kept = median
	c.record(median)
	if c.epochs++; c.epochs >= c.every {
		c.explore = true
	}
}

// record adds the median of an epoch of the way kept to its record,
// dropping the oldest when full. The caller holds mu.
func (c *Chooser) record(median time.Duration) {
	if c.nrecent < keptEpochs {
		c.recent[c.nrecent] = median
		c.nrecent++
		return
	}
	copy(c.recent[:], c.recent[1:])
	c.recent[keptEpochs-1] = median
}

// lately is how long the way kept's waits have taken lately: the median
// of its recorded epochs (the lower of the middle two when even), 0 when
// none is recorded. The caller holds mu.
func (c *Chooser) lately() time.Duration {
	var v [keptEpochs]time.Duration
	s := v[:c.nrecent]
	copy(s, c.recent[:c.nrecent])
	if len(s) == 0 {
		return 0
	}
	slices.Sort(s)
	return s[(len(s)-1)/2]
}

// Choice is what a Chooser holds now (diagnostics): whether it spins,
// the last epoch's median wait that way, and how often it switched.
type Choice struct {
	Spinning bool
	Median   time.Duration
	Switches int
}

// Choice reports what c holds now.
func (c *Chooser) Choice() Choice {
	c.mu.Lock()
	defer c.mu.Unlock()
	return Choice{Spinning: !c.sleep, Median: c.kept, Switches: c.switches}
}
