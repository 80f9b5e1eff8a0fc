package bench

import (
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestParseSchedstat(t *testing.T) {
	for _, tc := range []struct {
		name, line string
		want       time.Duration
		err        bool
	}{
		{"thread", "3297815 440544 2\n", 440544, false},
		{"no newline", "1 0 0", 0, false},
		{"large", "99999999999 123456789012 77\n", 123456789012, false},
		{"two fields", "3297815 440544\n", 0, true},
		{"four fields", "1 2 3 4\n", 0, true},
		{"not a number", "1 many 3\n", 0, true},
		{"negative", "1 -5 3\n", 0, true},
		{"empty", "", 0, true},
	} {
		got, err := parseSchedstat(tc.line)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("%s: got %v, %v; want %v, error %v", tc.name, got, err, tc.want, tc.err)
		}
	}
}

func FuzzParseSchedstat(f *testing.F) {
	f.Add("3297815 440544 2\n")
	f.Add("1 2")
	f.Add("1 99999999999999999999 3")
	f.Fuzz(func(t *testing.T, line string) {
		if d, err := parseSchedstat(line); err == nil && d < 0 {
			t.Fatalf("%q: run delay %v", line, d)
		}
	})
}

func TestParseProcStatCPU(t *testing.T) {
	for _, tc := range []struct {
		name, stat string
		want       cpuTicks
		err        bool
	}{
		// user nice system idle iowait irq softirq steal guest guest_nice
		{"kernel 6", "cpu  100 2 30 400 5 6 7 8 50 1\ncpu0 1 2 3 4 5 6 7 8 9 10\n", cpuTicks{idle: 405, total: 558}, false},
		{"eight counters", "cpu 1 1 1 1 1 1 1 1\n", cpuTicks{idle: 2, total: 8}, false},
		{"too few", "cpu 1 1 1 1\n", cpuTicks{}, true},
		{"per-CPU line first", "cpu0 1 1 1 1 1 1 1 1\n", cpuTicks{}, true},
		{"not a number", "cpu 1 1 1 x 1 1 1 1\n", cpuTicks{}, true},
		{"overflow", "cpu 18446744073709551615 1 0 0 0 0 0 0\n", cpuTicks{}, true},
		{"empty", "", cpuTicks{}, true},
	} {
		got, err := parseProcStatCPU(tc.stat)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("%s: got %+v, %v; want %+v, error %v", tc.name, got, err, tc.want, tc.err)
		}
	}
}

func FuzzParseProcStatCPU(f *testing.F) {
	f.Add("cpu  100 2 30 400 5 6 7 8 50 1\n")
	f.Add("cpu 1 1 1 1\n")
	f.Add("cpu 18446744073709551615 1 0 0 0 0 0 0\n")
	f.Fuzz(func(t *testing.T, stat string) {
		if c, err := parseProcStatCPU(stat); err == nil && c.idle > c.total {
			t.Fatalf("%q: idle %d of %d", stat, c.idle, c.total)
		}
	})
}

func TestIdleShare(t *testing.T) {
	before := cpuTicks{idle: 100, total: 1000}
	for _, tc := range []struct {
		after cpuTicks
		want  float64
	}{
		{cpuTicks{idle: 150, total: 1200}, 0.25},
		{cpuTicks{idle: 100, total: 1100}, 0},
		{cpuTicks{idle: 100, total: 1000}, 0}, // no time passed
		{cpuTicks{idle: 90, total: 1100}, 0},  // counters went back: nothing to say
	} {
		if got := tc.after.idleShare(before); got != tc.want {
			t.Errorf("%+v after %+v: idle share %v; want %v", tc.after, before, got, tc.want)
		}
	}
	now, err := machineTicks()
	if err != nil || now.total == 0 || now.idle > now.total {
		t.Fatalf("this machine's ticks: %+v, %v", now, err)
	}
}

// TestProcessRunDelay makes this process's threads wait for a CPU: two
// threads pinned to one CPU, each busy until both have run their share,
// so one waits runnable while the other runs. The run delay read from
// /proc must grow.
func TestProcessRunDelay(t *testing.T) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		t.Skipf("this environment refuses sched_getaffinity (%v): the test needs CPU affinity to make two threads share one CPU", err)
	}
	cpu := -1
	for i := range 1024 {
		if set.IsSet(i) {
			cpu = i
			break
		}
	}
	before, err := processRunDelay(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			var one unix.CPUSet
			one.Set(cpu)
			if err := unix.SchedSetaffinity(0, &one); err != nil {
				errs <- err
				return
			}
			defer unix.SchedSetaffinity(0, &set) // every CPU again before the thread is reused
			// Busy for 40 ms of this thread's own CPU time: the two
			// threads share one CPU, so each waits while the other runs.
			var ts unix.Timespec
			unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
			until := ts.Nano() + 40e6
			for ts.Nano() < until {
				unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Skipf("this environment refuses sched_setaffinity (%v): the test needs CPU affinity to make two threads share one CPU", err)
	}
	after, err := processRunDelay(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if after <= before {
		t.Fatalf("two threads sharing one CPU for 40 ms each: run delay %v before, %v after; want it to grow", before, after)
	}
}
