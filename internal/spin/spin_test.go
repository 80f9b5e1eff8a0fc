package spin

import (
	"context"
	"testing"
	"time"
)

const testEnv = "KVCONNECT_TEST_SPIN"

func TestAdaptBudgets(t *testing.T) {
	us := time.Microsecond
	for _, tc := range []struct {
		name  string
		waits []time.Duration
		fixed time.Duration
		want  time.Duration
	}{
		{"nothing learned", nil, 0, minSpin},
		{"short waits", []time.Duration{2 * us, 3 * us}, 0, minSpin},
		{"twice the mean", []time.Duration{30 * us}, 0, 60 * us},
		{"capped", []time.Duration{90 * us}, 0, 100 * us},
		{"beyond the cap: hardly spin", []time.Duration{5 * time.Millisecond}, 0, minSpin / 2},
		{"fixed", []time.Duration{5 * time.Millisecond}, 7 * us, 7 * us},
		{"never", nil, -1, 0},
		{"negative waits ignored", []time.Duration{-5 * us, 30 * us}, 0, 60 * us},
	} {
		a := &Adapt{Max: 100 * us, Fixed: tc.fixed}
		for _, w := range tc.waits {
			a.Observe(w)
		}
		if got := a.Budget(); got != tc.want {
			t.Errorf("%s: budget %v, want %v", tc.name, got, tc.want)
		}
	}
	// It follows a change: after long waits, short ones bring it back.
	a := &Adapt{Max: 100 * us}
	a.Observe(3 * time.Millisecond)
	for i := 0; i < 64; i++ {
		a.Observe(20 * us)
	}
	if got := a.Budget(); got > 50*us {
		t.Errorf("after 64 short waits the budget is %v", got)
	}
	t.Setenv(testEnv, "0")
	if NewAdapt(testEnv, us).Budget() != 0 {
		t.Error("a knob of 0 still spins")
	}
	t.Setenv(testEnv, "15us")
	if NewAdapt(testEnv, us).Budget() != 15*us {
		t.Error("a knob of 15us is not 15us")
	}
	t.Setenv(testEnv, "bogus")
	if NewAdapt(testEnv, 100*us).Budget() != minSpin {
		t.Error("a malformed knob is not ignored")
	}
}

// TestAdaptContention: when more than a quarter of recent spins were
// preempted, budgets are 0 but for one probe in probeEvery; a window of
// clean spins brings spinning back.
func TestAdaptContention(t *testing.T) {
	a := &Adapt{Max: 100 * time.Microsecond}
	for i := 0; i < spinWindow; i++ {
		a.spun(i%8 == 0) // an eighth preempted: noise
	}
	if a.Budget() == 0 {
		t.Fatal("occasional preemptions stopped spinning")
	}
	for i := 0; i < spinWindow; i++ {
		a.spun(i%2 == 0)
	}
	spins := 0
	for i := 0; i < 10*probeEvery; i++ {
		if a.Budget() > 0 {
			spins++
		}
	}
	if spins != 10 {
		t.Fatalf("contended: %d of %d budgets spin, want 10", spins, 10*probeEvery)
	}
	for i := 0; i < spinWindow; i++ {
		a.spun(false)
	}
	if a.Budget() == 0 {
		t.Fatal("spinning did not come back after a clean window")
	}
}

// TestSpinSlowEndsAtItsBudget: a spinner that is not descheduled spins
// until its time is up, and its Adapt hears of no spin (only spins that
// ended early count); one that finds the clock jumped (it was
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
	if a.spins.Load() != 1 || a.preempts.Load() != 1 {
		t.Fatalf("Adapt heard of %d spins, %d preempted; want 1, 1", a.spins.Load(), a.preempts.Load())
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
