package spin

import (
	"testing"
	"time"
)

// feed runs n waits through c: each takes spinning or sleeping as the
// Chooser says for it. It returns how many spun.
func feed(c *Chooser, n int, spinning, sleeping time.Duration) (spun int) {
	for range n {
		if c.Spinning() {
			spun++
			c.Observe(spinning)
		} else {
			c.Observe(sleeping)
		}
	}
	return spun
}

// TestChooserKeepsTheFasterWay: whichever way ends waits clearly sooner
// is kept (and the other tried now and then, less often while it keeps
// losing); when the machine changes, the choice follows.
func TestChooserKeepsTheFasterWay(t *testing.T) {
	us := time.Microsecond
	var c Chooser
	if !c.Spinning() {
		t.Fatal("a new Chooser does not spin first")
	}
	// Spinning pays (a quiet machine): it stays, with tries of sleeping.
	n := 100 * chooseEpoch
	if spun := feed(&c, n, 15*us, 110*us); spun < n*3/4 || spun == n {
		t.Fatalf("spinning faster: %d of %d waits spun, want most but not all (tries of sleeping)", spun, n)
	}
	if ch := c.Choice(); !ch.Spinning || ch.Switches != 0 || ch.Median != 15*us {
		t.Fatalf("spinning faster: %+v", ch)
	}
	// The tries of the other way back off while it keeps losing.
	if c.every != exploreMax {
		t.Fatalf("after 100 epochs of losing tries, sleeping is tried every %d epochs, want %d", c.every, exploreMax)
	}
	// The machine gets busy: sleeping is faster now, and is taken.
	n = 2 * exploreMax * chooseEpoch
	feed(&c, n, 130*us, 30*us)
	if ch := c.Choice(); ch.Spinning || ch.Switches != 1 {
		t.Fatalf("sleeping faster: %+v", ch)
	}
	if spun := feed(&c, n, 130*us, 30*us); spun == 0 || spun > n/4 {
		t.Fatalf("sleeping faster: %d of %d waits spun, want a few (tries of spinning)", spun, n)
	}
	// And back.
	feed(&c, 2*exploreMax*chooseEpoch, 15*us, 110*us)
	if ch := c.Choice(); !ch.Spinning || ch.Switches != 2 {
		t.Fatalf("spinning faster again: %+v", ch)
	}
}

// TestChooserNeedsAClearWin: a way a little faster (less than
// switchBelow's margin) does not make the Chooser switch, and neither
// do the first waits of an epoch (a switch takes a few waits to show) or
// a long tail (medians, not means).
func TestChooserNeedsAClearWin(t *testing.T) {
	us := time.Microsecond
	var c Chooser
	feed(&c, 200*chooseEpoch, 100*us, 90*us)
	if ch := c.Choice(); !ch.Spinning || ch.Switches != 0 {
		t.Fatalf("sleeping 10%% faster made it switch: %+v", ch)
	}

	// Each epoch of sleeping starts slow (its settling waits) and has a
	// few very long waits; its median is what counts.
	var d Chooser
	for range 200 {
		sleeping := !d.Spinning()
		for i := range chooseEpoch {
			switch {
			case !sleeping:
				d.Observe(100 * us)
			case i < chooseSettle:
				d.Observe(time.Millisecond)
			case i%8 == 0:
				d.Observe(50 * time.Millisecond)
			default:
				d.Observe(40 * us)
			}
		}
	}
	if ch := d.Choice(); ch.Spinning || ch.Median != 40*us {
		t.Fatalf("sleeping's median 40µs against 100µs: %+v", ch)
	}
}

// TestChooserIgnoresOneSlowEpoch: one slow epoch of the way kept (one
// in four here, as a 2-vCPU VM gives spinning when the scheduler briefly
// puts a process on the spinner's vCPU) does not make a Chooser take a
// way that is slower the rest of the time; a way that stays slow for
// several epochs is still left.
func TestChooserIgnoresOneSlowEpoch(t *testing.T) {
	us := time.Microsecond
	var c Chooser
	waits := 0
	for range 200 * chooseEpoch {
		if c.Spinning() {
			d := 45 * us
			if (waits/chooseEpoch)%4 == 3 {
				d = 150 * us
			}
			c.Observe(d)
		} else {
			c.Observe(100 * us)
		}
		waits++
	}
	if ch := c.Choice(); !ch.Spinning || ch.Switches != 0 {
		t.Fatalf("spinning 45µs with one epoch in four at 150µs, sleeping 100µs: %+v, want spinning, no switch", ch)
	}
	// Spinning slow for good: sleeping is taken within a few tries.
	feed(&c, 4*exploreMax*chooseEpoch, 150*us, 100*us)
	if ch := c.Choice(); ch.Spinning || ch.Switches != 1 {
		t.Fatalf("spinning 150µs for good, sleeping 100µs: %+v, want sleeping after one switch", ch)
	}
}

// TestChoosingAdapt: an Adapt with a Chooser spins for all of Max while
// the Chooser spins (whatever the share of catches) and not at all
// while it sleeps.
func TestChoosingAdapt(t *testing.T) {
	us := time.Microsecond
	a := NewChoosing("KVCONNECT_TEST_SPIN_UNSET", 100*us)
	for range 32 {
		a.try(false)
	}
	if got := a.Budget(); got != 100*us {
		t.Fatalf("choosing to spin: budget %v, want Max", got)
	}
	for range 100 * chooseEpoch {
		if a.Budget() > 0 {
			a.Took(200 * us)
		} else {
			a.Took(20 * us)
		}
	}
	if ch := a.Choose.Choice(); ch.Spinning {
		t.Fatalf("sleeping 10x faster: choice %+v", ch)
	}
	zero := 0
	for range 10 {
		if a.Budget() == 0 {
			zero++
		}
	}
	if zero == 0 {
		t.Fatal("choosing to sleep, yet every budget spins")
	}
}
