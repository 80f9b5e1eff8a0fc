package spin

import (
	"context"
	"testing"
	"time"
)

const testEnv = "KVCONNECT_TEST_SPIN"

// TestAdaptBudgets: all of Max while at least half of the recent tries
// caught their wait, hardly anything (but a try now and then) when
// fewer did, and the tries that catch bring Max back; knobs fix it.
func TestAdaptBudgets(t *testing.T) {
	us := time.Microsecond
	a := &Adapt{Max: 100 * us}
	if got := a.Budget(); got != 100*us {
		t.Fatalf("nothing tried: budget %v, want Max", got)
	}
	for range 4 {
		a.try(false)
	}
	if got := a.Budget(); got != 100*us {
		t.Fatalf("after 4 misses of many catches' worth: budget %v, want Max", got)
	}
	for range 16 {
		a.try(false)
	}
	tries := 0
	for range 10 * probeEvery {
		switch a.Budget() {
		case 100 * us:
			tries++
		case minSpin / 2:
		default:
			t.Fatalf("a budget that is neither a try nor a token spin")
		}
	}
	if tries != 10 {
		t.Fatalf("mostly missing: %d tries in %d waits, want 10", tries, 10*probeEvery)
	}
	for range 16 {
		a.try(true)
	}
	if got := a.Budget(); got != 100*us {
		t.Fatalf("after 16 catches: budget %v, want Max", got)
	}
	if st := a.Stats(); st.Tries != 36 || st.Caught != 16 || st.CatchShare < 0.5 {
		t.Fatalf("stats %+v, want 36 tries, 16 caught, a share of at least a half", st)
	}

	a.Fixed = 7 * us
	for range 32 {
		a.try(false)
	}
	if got := a.Budget(); got != 7*us {
		t.Errorf("fixed: budget %v, want 7µs", got)
	}
	a.Fixed = -1
	if a.Budget() != 0 {
		t.Error("a knob of never still spins")
	}
	t.Setenv(testEnv, "0")
	if NewAdapt(testEnv, us).Budget() != 0 {
		t.Error("a knob of 0 still spins")
	}
	t.Setenv(testEnv, "15us")
	if NewAdapt(testEnv, us).Budget() != 15*us {
		t.Error("a knob of 15us is not 15us")
	}
	if NewChoosing(testEnv, us).Budget() != 15*us {
		t.Error("a knob of 15us does not override the Chooser")
	}
	t.Setenv(testEnv, "bogus")
	if NewAdapt(testEnv, 100*us).Budget() != 100*us {
		t.Error("a malformed knob is not ignored")
	}
}

// TestSpinnerTries: a spin of at least half of Max is a try, caught when
// it ends before its budget, missed when the budget runs out; a shorter
// one is none; a descheduled one is counted as such and is no try.
func TestSpinnerTries(t *testing.T) {
	a := &Adapt{Max: 20 * time.Millisecond}
	sp := New(time.Hour, a)
	sp.Spin()
	sp.Done() // the caller saw its wait end
	sp = New(15*time.Millisecond, a)
	sp.until = time.Now() // as if its budget were spent (it is a try still)
	if sp.lasts() {
		t.Fatal("a spin past its budget lasts")
	}
	sp.preempted = false // whatever this machine did meanwhile
	sp.Done()
	sp = New(time.Millisecond, a) // no try
	sp.Done()
	sp = New(time.Hour, a)
	sp.last = sp.last.Add(-time.Millisecond) // as if descheduled since
	if sp.Spin() {
		for sp.Spin() {
		}
	}
	sp.Done()
	if st := a.Stats(); st.Tries != 2 || st.Caught != 1 || st.Preempted != 1 {
		t.Fatalf("stats %+v; want 2 tries, 1 caught, 1 preempted", st)
	}
}

// TestSpinSlowEndsAtItsBudget: a spinner that is not descheduled spins
// until its time is up; one that finds the clock jumped (it was
// descheduled) stops at once and reports a preemption.
func TestSpinSlowEndsAtItsBudget(t *testing.T) {
	until := time.Now().Add(2 * time.Millisecond)
	sp := Until(until, nil)
	checks := 0
	for sp.SpinSlow() {
		checks++
	}
	if !sp.preempted && time.Now().Before(until) {
		t.Fatalf("stopped before its budget after %d checks, not preempted", checks)
	}

	a := &Adapt{Max: time.Second}
	sp = Until(time.Now().Add(time.Hour), a)
	sp.last = sp.last.Add(-time.Millisecond) // as if it had been off a processor since
	if sp.SpinSlow() {
		t.Fatal("a spinner that was descheduled goes on spinning")
	}
	if !sp.preempted {
		t.Fatal("the preemption is not recorded")
	}
	sp.Done()
	if st := a.Stats(); st.Tries != 0 || st.Preempted != 1 {
		t.Fatalf("Adapt heard of %d tries, %d preempted; want 0, 1", st.Tries, st.Preempted)
	}
}

// TestKeepOnPreempt: a spinner told to keep on spins past a preemption
// to its budget, and the preemption still counts (no try).
func TestKeepOnPreempt(t *testing.T) {
	a := &Adapt{Max: time.Second}
	until := time.Now().Add(2 * time.Millisecond)
	sp := Until(until, a)
	sp.KeepOnPreempt()
	sp.last = sp.last.Add(-time.Millisecond) // as if it had been off a processor since
	if !sp.SpinSlow() {
		t.Fatal("a spinner told to keep on stopped at its preemption")
	}
	for sp.SpinSlow() {
	}
	if time.Now().Before(until) {
		t.Fatal("stopped before its budget")
	}
	sp.Done()
	if st := a.Stats(); st.Tries != 0 || st.Preempted != 1 {
		t.Fatalf("Adapt heard of %d tries, %d preempted; want 0, 1", st.Tries, st.Preempted)
	}
}

// TestLockedSpinnerNeverYields: a spinner yields its processor every so
// many checks, but not when its goroutine is locked to its thread.
func TestLockedSpinnerNeverYields(t *testing.T) {
	for _, locked := range []bool{false, true} {
		yields := 0
		sp := Until(time.Now().Add(time.Hour), nil)
		sp.yield = func() { yields++ }
		if locked {
			sp.Locked()
		}
		for range 4 * 2048 {
			sp.Spin()
		}
		for range 64 {
			sp.SpinSlow()
		}
		if locked && yields != 0 || !locked && yields < 4 {
			t.Errorf("locked %v: %d yields over 8192 checks and 64 slow ones", locked, yields)
		}
	}
	if !MayYield(context.Background()) || MayYield(WithoutYield(context.Background())) {
		t.Error("WithoutYield's mark is not seen")
	}
}

// TestYieldEverySpacesYieldsByTime: a spinner told YieldEvery(d) does
// not yield in its first d however many checks it makes (one spinning
// with the default yields every 2048), yields once d has passed, and
// never more than once per d; a locked one never yields. Its Adapt
// counts the yields.
func TestYieldEverySpacesYieldsByTime(t *testing.T) {
	const d = 2 * time.Millisecond
	for _, locked := range []bool{false, true} {
		yields := 0
		a := &Adapt{Max: time.Hour}
		start := time.Now()
		sp := Until(start.Add(time.Hour), a)
		sp.yield = func() { yields++ }
		sp.KeepOnPreempt() // a descheduled test goroutine keeps spinning
		sp.YieldEvery(d)
		if locked {
			sp.Locked()
		}
		for range 4 * 2048 {
			sp.Spin()
		}
		if early := time.Since(start) < d; early && yields != 0 {
			t.Fatalf("locked %v: %d yields over 8192 checks in their first %v", locked, yields, d)
		}
		for time.Since(start) < 3*d+d/2 {
			sp.Spin()
		}
		for range 256 {
			sp.Spin() // two more looks at the clock: the second sees the first's time
		}
		spun := time.Since(start)
		sp.Done()
		switch {
		case locked && yields != 0:
			t.Errorf("locked: %d yields", yields)
		case !locked && (yields < 1 || time.Duration(yields) > spun/d):
			t.Errorf("%d yields over %v spinning, want 1 to one per %v", yields, spun, d)
		}
		if got := a.Stats().Yields; got != int64(yields) {
			t.Errorf("locked %v: Adapt counted %d yields, the spinner made %d", locked, got, yields)
		}
	}
}
