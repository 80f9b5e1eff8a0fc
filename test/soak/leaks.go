package soak

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"
)

// procs lists the processes: pid -> (ppid, exe).
func procs() map[int][2]string {
	out := map[int][2]string{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 2 {
			continue
		}
		exe, _ := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
		out[pid] = [2]string{f[1], exe}
	}
	return out
}

func childrenOf(pid int) []int {
	var out []int
	want := strconv.Itoa(pid)
	for p, v := range procs() {
		if v[0] == want {
			out = append(out, p)
		}
	}
	return out
}

// snapshot is what the process holds at one moment.
type snapshot struct {
	goroutines int
	fds        int
	sockets    int
	shm        map[string]bool
}

func take() snapshot {
	s := snapshot{goroutines: runtime.NumGoroutine(), shm: map[string]bool{}}
	ents, _ := os.ReadDir("/proc/self/fd")
	for _, e := range ents {
		s.fds++
		if l, _ := os.Readlink("/proc/self/fd/" + e.Name()); strings.HasPrefix(l, "socket:") {
			s.sockets++
		}
	}
	shm, _ := os.ReadDir("/dev/shm")
	for _, e := range shm {
		s.shm[e.Name()] = true
	}
	return s
}

// Leaks is what was left after everything closed.
type Leaks struct {
	Goroutines int      `json:"goroutines"`
	FDs        int      `json:"fds"`
	Sockets    int      `json:"sockets"`
	Processes  []string `json:"processes"` // left running from this run's binaries
	ShmFiles   []string `json:"shm_files"`
	Stacks     string   `json:"-"` // goroutine dump when goroutines leaked
}

// Zero reports whether nothing leaked.
func (l Leaks) Zero() bool {
	return l.Goroutines <= 0 && l.FDs <= 0 && l.Sockets <= 0 && len(l.Processes) == 0 && len(l.ShmFiles) == 0
}

func (l Leaks) String() string {
	return fmt.Sprintf("goroutines %d, fds %d, sockets %d, processes %d %v, /dev/shm files %d %v",
		max(l.Goroutines, 0), max(l.FDs, 0), max(l.Sockets, 0), len(l.Processes), l.Processes, len(l.ShmFiles), l.ShmFiles)
}

// leaksSince compares now with before, giving goroutines and descriptors
// up to settle to wind down. binDir is where this run's binaries live: a
// process running one of them is a leak.
func leaksSince(before snapshot, binDir string, settle time.Duration) Leaks {
	deadline := time.Now().Add(settle)
	var now snapshot
	for {
		now = take()
		if (now.goroutines <= before.goroutines && now.fds <= before.fds) || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	l := Leaks{Goroutines: now.goroutines - before.goroutines, FDs: now.fds - before.fds, Sockets: now.sockets - before.sockets}
	for name := range now.shm {
		if !before.shm[name] {
			l.ShmFiles = append(l.ShmFiles, name)
		}
	}
	sort.Strings(l.ShmFiles)
	if binDir != "" {
		for pid, v := range procs() {
			if strings.HasPrefix(v[1], binDir+string(os.PathSeparator)) {
				l.Processes = append(l.Processes, fmt.Sprintf("%d %s", pid, filepath.Base(v[1])))
			}
		}
		sort.Strings(l.Processes)
	}
	if l.Goroutines > 0 {
		buf := make([]byte, 1<<20)
		l.Stacks = string(buf[:runtime.Stack(buf, true)])
	}
	return l
}
