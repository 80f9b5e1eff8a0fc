package host

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// socketDirPrefix names the directory that holds one host process's
// plugin socket directories: <TMPDIR>/kvconnect-plugins.<pid>.<start>,
// where <start> tells this process from a later one given the same pid.
//
// go-plugin makes a directory per plugin (plugin-dir*) for the plugin's
// Unix socket and removes it when the plugin is killed. A host that dies
// without closing its plugins (SIGKILL, a crash, an exit without Close)
// leaves those behind, one per plugin per death: over days of restarts,
// thousands of directories in /tmp. Gathering a process's under one
// directory named after it lets the next host to start find the ones
// whose process is gone, and remove them.
const socketDirPrefix = "kvconnect-plugins."

// maxSocketBase is the longest base directory that leaves room for
// go-plugin's names under it, <base>/plugin-dir<10 digits>/plugin<10
// digits>, in a Unix socket's path (107 bytes on Linux).
const maxSocketBase = 107 - len("/plugin-dir") - 10 - len("/plugin") - 10

// socketDirs counts, per base directory, the plugins of this process
// that use it, so the last one to go removes it. It is keyed by path
// because TMPDIR can change while a process runs (tests do).
var socketDirs = &socketDirSet{users: map[string]int{}}

type socketDirSet struct {
	mu    sync.Mutex
	users map[string]int
}

// acquire returns the directory for this process's next plugin socket
// directory, creating it, or "" when TMPDIR is too long for one (then
// go-plugin uses TMPDIR, and nothing is swept). The first user of a
// directory first removes what dead host processes left in the same
// temporary directory. Every acquire that returns no error is paired
// with one release.
func (s *socketDirSet) acquire() (string, error) {
	tmp := os.TempDir()
	start := processStart(os.Getpid())
	if start == "" {
		start = "0" // no /proc: a name no sweep removes
	}
	dir := filepath.Join(tmp, fmt.Sprintf("%s%d.%s", socketDirPrefix, os.Getpid(), start))
	if len(dir) > maxSocketBase {
		// The plugin's socket path would pass the kernel's limit: go-plugin
		// makes its directory in TMPDIR itself, as it did before, and one
		// that a crash leaves is not found by the next host.
		return "", nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.users[dir] == 0 {
		sweepSocketDirs(tmp, dir)
	}
	// Created every time, not only by the first user: a cleaner of /tmp
	// may have removed it meanwhile.
	if err := os.Mkdir(dir, 0o700); err != nil {
		if !os.IsExist(err) {
			return "", err
		}
		// There already: ours, or made by someone who guessed the name
		// (pid and start time are public in /proc) to swap the plugin's
		// socket under us. Only a directory of this user that no one
		// else may enter is used; otherwise go-plugin makes its own in
		// TMPDIR (a random name), and only the sweep after a crash is lost.
		if !privateDir(dir) {
			return "", nil
		}
	}
	s.users[dir]++
	return dir, nil
}

// privateDir reports whether path is a directory (not a link) owned by
// this user, that no other user may read, write or enter.
func privateDir(path string) bool {
	fi, err := os.Lstat(path)
	return err == nil && ownedByUs(path) && fi.Mode().Perm()&0o077 == 0
}

// release ends one use of dir; the last removes it (if empty: a plugin
// that is still being killed keeps its own directory until go-plugin
// removes it).
func (s *socketDirSet) release(dir string) {
	if dir == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.users[dir]--; s.users[dir] > 0 {
		return
	}
	delete(s.users, dir)
	os.Remove(dir) // fails if not empty: then the next sweep after this process takes it
}

// sweepSocketDirs removes the base directories in tmp whose host process
// is gone, with whatever they hold, except own. Only directories this
// user owns are touched; anything it cannot read or parse is left alone.
func sweepSocketDirs(tmp, own string) {
	entries, err := os.ReadDir(tmp)
	if err != nil {
		return
	}
	for _, e := range entries {
		name := e.Name()
		if !e.IsDir() || !strings.HasPrefix(name, socketDirPrefix) {
			continue
		}
		path := filepath.Join(tmp, name)
		if path == own {
			continue
		}
		pid, start, ok := parseSocketDirName(name)
		if !ok || !ownedByUs(path) || !processGone(pid, start) || socketAnswers(path) {
			continue
		}
		os.RemoveAll(path)
	}
}

// socketAnswers reports whether a plugin socket under dir (in go-plugin's
// plugin-dir*) accepts a connection: its process lives, whatever its pid
// says. A /tmp shared between PID namespaces (containers) shows another
// namespace's live host under a pid that is free, or taken, in this one.
// A socket that refuses (ECONNREFUSED: no one listens) is dead; any other
// failure counts as alive, so nothing doubtful is removed.
func socketAnswers(dir string) bool {
	socks, _ := filepath.Glob(filepath.Join(dir, "plugin-dir*", "*"))
	for _, s := range socks {
		fi, err := os.Lstat(s)
		if err != nil || fi.Mode()&os.ModeSocket == 0 {
			continue
		}
		c, err := net.DialTimeout("unix", s, 100*time.Millisecond)
		if err == nil {
			c.Close()
			return true
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			return true
		}
	}
	return false
}

// parseSocketDirName reads the pid and start of a base directory's name.
func parseSocketDirName(name string) (pid int, start string, ok bool) {
	rest := strings.TrimPrefix(name, socketDirPrefix)
	p, start, found := strings.Cut(rest, ".")
	if !found || start == "" {
		return 0, "", false
	}
	pid, err := strconv.Atoi(p)
	if err != nil || pid <= 0 {
		return 0, "", false
	}
	for _, c := range start {
		if c < '0' || c > '9' {
			return 0, "", false
		}
	}
	return pid, start, true
}
