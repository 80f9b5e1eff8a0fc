//go:build linux

package host

import (
	"os"
	"strconv"
	"strings"
	"syscall"
)

// processStart is pid's start time in clock ticks since boot (field 22
// of /proc/<pid>/stat), or "" if there is no such process.
func processStart(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	// The command name (field 2) is in parentheses and may hold spaces
	// and parentheses: the fields after it start after the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return ""
	}
	fields := strings.Fields(s[i+1:])
	// fields[0] is field 3 (state), so field 22 is fields[19].
	if len(fields) < 20 {
		return ""
	}
	return fields[19]
}

// processGone reports whether the process that was pid, started at
// start, has ended: no process has that pid, or the one that has it
// started at another time (the pid was reused).
func processGone(pid int, start string) bool {
	now := processStart(pid)
	if now == "" {
		_, err := os.Stat("/proc/self/stat")
		return err == nil // no /proc at all tells nothing
	}
	return now != start
}

// ownedByUs reports whether path is a directory (not a link to one)
// owned by this process's user.
func ownedByUs(path string) bool {
	fi, err := os.Lstat(path)
	if err != nil || !fi.IsDir() {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == os.Getuid()
}
