//go:build linux

package fdlimit

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// lowLimit lowers this process's RLIMIT_NOFILE soft limit to n for the
// test.
func lowLimit(t *testing.T, n uint64) {
	t.Helper()
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: n, Max: old.Max}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old) })
}

func TestExplainEMFILE(t *testing.T) {
	open := OpenCount()
	if open < 0 {
		t.Skip("no /proc/self/fd")
	}
	limit := uint64(open + 8)
	lowLimit(t, limit)
	var files []*os.File
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	var err error
	for i := 0; i < 64 && err == nil; i++ {
		var f *os.File
		if f, err = os.Open("/dev/null"); err == nil {
			files = append(files, f)
		}
	}
	if !errors.Is(err, unix.EMFILE) {
		t.Fatalf("opening past the limit: %v, want EMFILE", err)
	}
	files[0].Close() // room for Explain's own look at /proc/self/fd
	files = files[1:]
	got := Explain(fmt.Errorf("shm: memfd_create: %w", err))
	msg := got.Error()
	for _, want := range []string{"EMFILE", "RLIMIT_NOFILE " + strconv.FormatUint(limit, 10), "descriptors open", "ulimit -n"} {
		if !strings.Contains(msg, want) {
			t.Errorf("%q does not say %q", msg, want)
		}
	}
	if !errors.Is(got, unix.EMFILE) {
		t.Error("the explained error no longer matches EMFILE")
	}
}

func TestExplainTable(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		says string // "" = unchanged
	}{
		{"nil", nil, ""},
		{"other errno", fmt.Errorf("x: %w", unix.EINVAL), ""},
		{"ENFILE", fmt.Errorf("x: %w", unix.ENFILE), "fs.file-max"},
		{"ETOOMANYREFS", unix.ETOOMANYREFS, "in flight"},
		{"EMFILE", unix.EMFILE, "RLIMIT_NOFILE"},
	} {
		got := Explain(tc.err)
		if tc.says == "" {
			if got != tc.err {
				t.Errorf("%s: changed to %v", tc.name, got)
			}
			continue
		}
		if got == nil || !strings.Contains(got.Error(), tc.says) || !errors.Is(got, tc.err) {
			t.Errorf("%s: %v, want it to say %q and wrap the cause", tc.name, got, tc.says)
		}
	}
	if m := ExplainMmap(unix.ENOMEM); !strings.Contains(m.Error(), "vm.max_map_count") {
		t.Errorf("mmap ENOMEM: %v", m)
	}
	if d := Dropped("the descriptor for token 7"); !errors.Is(d, unix.EMFILE) || !strings.Contains(d.Error(), "token 7") || !strings.Contains(d.Error(), "MSG_CTRUNC") {
		t.Errorf("Dropped: %v", d)
	}
}
