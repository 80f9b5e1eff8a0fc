//go:build linux

package fdlimit

import (
	"errors"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Explain returns err with the descriptor counts and limits when its
// cause is EMFILE (this process's RLIMIT_NOFILE) or ENFILE (the system's
// fs.file-max), and err unchanged otherwise. nil stays nil.
func Explain(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.EMFILE):
		return annotate(err, "EMFILE: %s", Status())
	case errors.Is(err, unix.ENFILE):
		return annotate(err, "ENFILE: the system's open-file table is full: %s; raise fs.file-max (sysctl -w fs.file-max=N)", systemStatus())
	case errors.Is(err, unix.ETOOMANYREFS):
		return annotate(err, "ETOOMANYREFS: too many descriptors in flight on the unix socket: %s", Status())
	}
	return err
}

// ExplainMmap is Explain for an mmap error: ENOMEM there usually means
// the process reached vm.max_map_count mappings.
func ExplainMmap(err error) error {
	if err != nil && errors.Is(err, unix.ENOMEM) {
		return annotate(err, "ENOMEM: out of memory or of mappings: this process has %s mappings, vm.max_map_count is %s; raise it with sysctl -w vm.max_map_count=N",
			count(mapsCount()), readTrim("/proc/sys/vm/max_map_count"))
	}
	return Explain(err)
}

// Dropped is the error for a descriptor the kernel dropped on its way in
// (recvmsg reported MSG_CTRUNC): the receiving process could not install
// it, almost always because it has RLIMIT_NOFILE descriptors open.
func Dropped(what string) error {
	return annotate(unix.EMFILE, "the kernel dropped %s on its way into this process (MSG_CTRUNC): EMFILE: %s", what, Status())
}

// Status describes this process's descriptors: how many are open and its
// RLIMIT_NOFILE, with what to do.
func Status() string {
	var lim unix.Rlimit
	limit := "unknown"
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err == nil {
		limit = strconv.FormatUint(lim.Cur, 10) + " (hard " + strconv.FormatUint(lim.Max, 10) + ")"
	}
	open := count(OpenCount())
	if _, err := openCount(); errors.Is(err, unix.EMFILE) {
		// Listing /proc/self/fd needs a descriptor too: none is left.
		open = "all its"
	}
	return "process " + strconv.Itoa(os.Getpid()) + " has " + open + " descriptors open, RLIMIT_NOFILE " + limit +
		"; raise it (ulimit -n, prlimit --nofile, LimitNOFILE= in a systemd unit)"
}

// OpenCount is the number of descriptors this process has open, or -1
// when it cannot tell (listing /proc/self/fd needs a descriptor too).
func OpenCount() int {
	n, err := openCount()
	if err != nil {
		return -1
	}
	return n
}

func openCount() (int, error) {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0, err
	}
	return len(ents) - 1, nil // the directory's own descriptor
}

// MapCount is the number of memory mappings of this process, or -1.
func MapCount() int { return mapsCount() }

func mapsCount() int {
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return -1
	}
	return strings.Count(string(b), "\n")
}

func systemStatus() string {
	nr := readTrim("/proc/sys/fs/file-nr") // allocated, free, max
	if f := strings.Fields(nr); len(f) == 3 {
		return f[0] + " files open system-wide, fs.file-max " + f[2]
	}
	return "fs.file-max " + readTrim("/proc/sys/fs/file-max")
}

func count(n int) string {
	if n < 0 {
		return "an unknown number of"
	}
	return strconv.Itoa(n)
}

func readTrim(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(b))
}
