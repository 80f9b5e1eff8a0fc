package testbin

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// futexSyscall is futex(2)'s number on linux/amd64 and linux/arm64 (what
// /proc/<pid>/task/<tid>/syscall reports a thread blocked in).
var futexSyscall = map[string]int{"amd64": 202, "arm64": 98}

// SleepsOnFutex reports whether a thread of process pid is blocked in
// futex(FUTEX_WAIT) with no timeout on the 32-bit word at byte offset off
// of its mapping of the memfd named name ("kvconnect:ring"): it sleeps
// until someone wakes it, not polling. It reads /proc, so it does not
// depend on how fast the machine is; it skips the test where /proc does
// not show blocked system calls.
func SleepsOnFutex(t testing.TB, pid int, name string, off uint64) bool {
	t.Helper()
	nr, ok := futexSyscall[runtime.GOARCH]
	if !ok {
		t.Skipf("no futex syscall number for %s", runtime.GOARCH)
	}
	addrs := memfdWords(t, pid, name, off)
	if len(addrs) == 0 {
		t.Fatalf("process %d maps no memfd named %q", pid, name)
	}
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/syscall", pid))
	if len(tasks) == 0 {
		t.Skipf("no /proc/%d/task/*/syscall: cannot see what threads are blocked in", pid)
	}
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // the thread ended, or the kernel hides it
		}
		// "202 0xuaddr 0xop 0xval 0xtimeout 0x... sp pc", or "running".
		fs := strings.Fields(string(b))
		if len(fs) < 5 || fs[0] != strconv.Itoa(nr) {
			continue
		}
		uaddr, _ := strconv.ParseUint(strings.TrimPrefix(fs[1], "0x"), 16, 64)
		op, _ := strconv.ParseUint(strings.TrimPrefix(fs[2], "0x"), 16, 64)
		timeout, _ := strconv.ParseUint(strings.TrimPrefix(fs[4], "0x"), 16, 64)
		const futexWait, cmdMask = 0, 0x7f // FUTEX_PRIVATE_FLAG and FUTEX_CLOCK_REALTIME aside
		if addrs[uaddr] && op&cmdMask == futexWait && timeout == 0 {
			return true
		}
	}
	return false
}

// memfdWords returns the addresses, in process pid, of byte offset off of
// every mapping of the memfd named name.
func memfdWords(t testing.TB, pid int, name string, off uint64) map[uint64]bool {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Skipf("cannot read the mappings of process %d: %v", pid, err)
	}
	addrs := map[uint64]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		// start-end perms offset dev inode path
		fs := strings.Fields(line)
		if len(fs) < 6 || !strings.HasPrefix(strings.Join(fs[5:], " "), "/memfd:"+name+" ") {
			continue
		}
		se := strings.SplitN(fs[0], "-", 2)
		start, _ := strconv.ParseUint(se[0], 16, 64)
		end, _ := strconv.ParseUint(se[1], 16, 64)
		foff, _ := strconv.ParseUint(fs[2], 16, 64)
		if off >= foff && off-foff < end-start {
			addrs[start+off-foff] = true
		}
	}
	return addrs
}

// CPUTime is the CPU time (user and system) process pid has used, from
// /proc/<pid>/stat: for benchmarks that report what idling costs.
func CPUTime(tb testing.TB, pid int) time.Duration {
	tb.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		tb.Skipf("no /proc/%d/stat: %v", pid, err)
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	u, _ := strconv.ParseUint(f[11], 10, 64)
	s, _ := strconv.ParseUint(f[12], 10, 64)
	const userHZ = 100 // sysconf(_SC_CLK_TCK) on Linux
	return time.Duration(u+s) * time.Second / userHZ
}
