//go:build linux

package testbin

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// Stop SIGSTOPs process pid (group: process group pid) and waits until it
// (every process of the group) is stopped. kill returns before a process
// running on another CPU has stopped, and a request sent in that instant
// is served: a test that needs the target stopped must wait for it.
func Stop(t testing.TB, pid int, group bool) {
	t.Helper()
	target := pid
	if group {
		target = -pid
	}
	if err := syscall.Kill(target, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	what := fmt.Sprintf("process %d to stop", pid)
	if group {
		what = fmt.Sprintf("process group %d to stop", pid)
	}
	Eventually(t, what, func() bool {
		if !group {
			state, _, ok := procState(strconv.Itoa(pid))
			return !ok || stoppedState(state)
		}
		entries, err := os.ReadDir("/proc")
		if err != nil {
			return false
		}
		for _, e := range entries {
			state, pgrp, ok := procState(e.Name())
			if ok && pgrp == pid && !stoppedState(state) {
				return false
			}
		}
		return true
	})
}

func stoppedState(s string) bool { return s == "T" || s == "t" || s == "Z" }

// procState reads a process's state and process group from /proc.
func procState(pid string) (state string, pgrp int, ok bool) {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return "", 0, false
	}
	// pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return "", 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 3 {
		return "", 0, false
	}
	g, err := strconv.Atoi(f[2])
	return f[0], g, err == nil
}
