package testbin

import (
	"os"
	"strings"
	"testing"
	"time"
)

// WaitLimit bounds every wait of Eventually and WaitClosed: far beyond
// what any condition takes on a loaded machine, so reaching it means the
// condition never came, not that the machine was slow.
const WaitLimit = time.Minute

// Eventually polls cond until it holds and returns how long that took
// (for a log line, never for an assertion); it fails t, naming what it
// waited for, if cond does not hold within WaitLimit. Use it for a state
// the test can only observe (a key in a store, a log line, a counter),
// not to order events the test controls: wait on those directly.
func Eventually(t testing.TB, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	pause := time.Millisecond
	for !cond() {
		if time.Since(start) > WaitLimit {
			t.Fatalf("timed out after %v waiting for %s", WaitLimit, what)
		}
		time.Sleep(pause) // polling an observed condition
		pause = min(2*pause, 20*time.Millisecond)
	}
	return time.Since(start)
}

// WaitClosed waits until ch is closed (or receives) and returns how long
// that took; it fails t, naming what it waited for, after WaitLimit.
func WaitClosed[T any](t testing.TB, ch <-chan T, what string) time.Duration {
	t.Helper()
	start := time.Now()
	timer := time.NewTimer(WaitLimit)
	defer timer.Stop()
	select {
	case <-ch:
	case <-timer.C:
		t.Fatalf("timed out after %v waiting for %s", WaitLimit, what)
	}
	return time.Since(start)
}

// EnvLong turns on the long tests (make test-long sets it).
const EnvLong = "KVCONNECT_TEST_LONG"

// Long skips the test unless the long tests are on (make test-long): what
// says what makes it long.
func Long(t testing.TB, what string) {
	t.Helper()
	if v := os.Getenv(EnvLong); v == "" || v == "0" || strings.EqualFold(v, "false") {
		t.Skipf("long test (%s): runs in make test-long (%s=1)", what, EnvLong)
	}
}
