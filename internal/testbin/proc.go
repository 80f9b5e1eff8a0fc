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

// Thread is a thread of a process blocked in a system call, as
// /proc/<pid>/task/<tid>/syscall shows it.
type Thread struct {
	TID  int
	Nr   int       // system call number
	Args [6]uint64 // its arguments, as the registers hold them
}

// Blocked returns the threads of process pid that are blocked in a system
// call (not running). It skips the test where /proc does not show them.
func Blocked(t testing.TB, pid int) []Thread {
	t.Helper()
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/syscall", pid))
	if len(tasks) == 0 {
		t.Skipf("no /proc/%d/task/*/syscall: cannot see what threads are blocked in", pid)
	}
	var out []Thread
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // the thread ended, or the kernel hides it
		}
		// "202 0xarg1 ... 0xarg6 0xsp 0xpc", "running", or "-1 sp pc".
		fs := strings.Fields(string(b))
		if len(fs) < 7 {
			continue
		}
		th := Thread{}
		th.TID, _ = strconv.Atoi(filepath.Base(filepath.Dir(f)))
		if th.Nr, err = strconv.Atoi(fs[0]); err != nil || th.Nr < 0 {
			continue
		}
		for i := range th.Args {
			th.Args[i], _ = strconv.ParseUint(strings.TrimPrefix(fs[1+i], "0x"), 16, 64)
		}
		out = append(out, th)
	}
	return out
}

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
	const futexWait, cmdMask = 0, 0x7f // FUTEX_PRIVATE_FLAG and FUTEX_CLOCK_REALTIME aside
	for _, th := range Blocked(t, pid) {
		// futex(uaddr, op, val, timeout, ...)
		if th.Nr == nr && addrs[th.Args[0]] && th.Args[1]&cmdMask == futexWait && th.Args[3] == 0 {
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

// ReadMem reads n bytes at address addr of process pid (the process
// itself, or one it may trace: its child), through /proc/<pid>/mem.
func ReadMem(t testing.TB, pid int, addr uint64, n int) ([]byte, error) {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		t.Skipf("cannot read the memory of process %d: %v", pid, err)
	}
	defer f.Close()
	b := make([]byte, n)
	if _, err := f.ReadAt(b, int64(addr)); err != nil {
		return nil, err
	}
	return b, nil
}
