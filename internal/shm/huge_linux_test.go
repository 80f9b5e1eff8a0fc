//go:build linux

package shm

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"unsafe"
)

// vma is what /proc/self/smaps says about one mapping.
type vma struct {
	flags    []string
	rss      int // kB
	pmdShmem int // kB mapped in huge pages (ShmemPmdMapped)
}

// vmaAt reads the smaps entry of the mapping that starts at mem[0].
func vmaAt(t *testing.T, mem []byte) vma {
	t.Helper()
	start := fmt.Sprintf("%x-", uintptr(unsafe.Pointer(&mem[0])))
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var v vma
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		fields := strings.Fields(line)
		if len(fields) > 0 && strings.Contains(fields[0], "-") && !strings.HasSuffix(fields[0], ":") {
			if in {
				return v
			}
			in = strings.HasPrefix(line, start)
			continue
		}
		if !in || len(fields) < 2 {
			continue
		}
		switch fields[0] {
		case "VmFlags:":
			v.flags = fields[1:]
		case "Rss:":
			v.rss, _ = strconv.Atoi(fields[1])
		case "ShmemPmdMapped:":
			v.pmdShmem, _ = strconv.Atoi(fields[1])
		}
	}
	if !in {
		t.Fatalf("no mapping starts at %s in /proc/self/smaps", start)
	}
	return v
}

// reopen opens s's file again, as a second process would receive it.
func reopen(t *testing.T, s *Segment) *os.File {
	t.Helper()
	f, err := os.OpenFile("/proc/self/fd/"+strconv.Itoa(int(s.File().Fd())), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func (v vma) asksHuge() bool {
	for _, f := range v.flags {
		if f == "hg" {
			return true
		}
	}
	return false
}

// TestLargeMappingsAskForHugePages: a whole region's mapping, made by New
// or by the other side's Map or MapView, carries MADV_HUGEPAGE (smaps'
// "hg" flag) and is populated; segments made in pieces (NewLazy) and
// mappings smaller than a huge page do not ask.
func TestLargeMappingsAskForHugePages(t *testing.T) {
	const size = 8 << 20
	s, err := New("huge", size)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if v := vmaAt(t, s.Bytes()); !v.asksHuge() || v.rss < size>>10 {
		t.Errorf("New(%d): VmFlags %v, Rss %d kB: want hg and %d kB populated", size, v.flags, v.rss, size>>10)
	}
	m, err := Map(reopen(t, s), 0, size)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if v := vmaAt(t, m.Bytes()); !v.asksHuge() || v.rss < size>>10 {
		t.Errorf("Map: VmFlags %v, Rss %d kB: want hg and %d kB populated", v.flags, v.rss, size>>10)
	}
	view, err := MapView(reopen(t, s), size)
	if err != nil {
		t.Fatal(err)
	}
	defer view.Close()
	if v := vmaAt(t, view.Bytes()); !v.asksHuge() {
		t.Errorf("MapView: VmFlags %v: want hg", v.flags)
	}

	lazy, err := NewLazy("lazy", size)
	if err != nil {
		t.Fatal(err)
	}
	defer lazy.Close()
	small, err := New("small", 64<<10)
	if err != nil {
		t.Fatal(err)
	}
	defer small.Close()
	for name, seg := range map[string]*Segment{"NewLazy": lazy, "New(64 KiB)": small} {
		if v := vmaAt(t, seg.Bytes()); v.asksHuge() {
			t.Errorf("%s: VmFlags %v: asks for huge pages", name, v.flags)
		}
	}
}

// TestHugePagesWhereAllowed: where the machine lets shared memory have
// huge pages on request, a region's pages are huge in the process that
// made it and in one that maps it.
func TestHugePagesWhereAllowed(t *testing.T) {
	setting, huge, ok := ShmemHuge()
	if !ok {
		t.Skipf("this kernel has no %s (no transparent huge pages)", ShmemHugeFile)
	}
	if !huge {
		t.Skipf("%s is %q: this machine gives shared memory no huge pages (echo advise > %s allows them)", ShmemHugeFile, setting, ShmemHugeFile)
	}
	const size = 8 << 20
	s, err := New("huge", size)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	m, err := Map(reopen(t, s), 0, size)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	// The first and last huge page may be cut by the mapping's
	// alignment; the rest must be huge.
	for name, mem := range map[string][]byte{"New": s.Bytes(), "Map": m.Bytes()} {
		if v := vmaAt(t, mem); v.pmdShmem < (size-2*hugeMin)>>10 {
			t.Errorf("%s with shmem_enabled %q: %d kB of %d kB in huge pages", name, setting, v.pmdShmem, size>>10)
		}
	}
}

func TestBracketed(t *testing.T) {
	for in, want := range map[string]string{
		"always within_size advise [never] deny force\n": "never",
		"[always] within_size advise never":              "always",
		"always":                                         "",
		"":                                               "",
		"] [":                                            "",
	} {
		if got := bracketed(in); got != want {
			t.Errorf("bracketed(%q) = %q, want %q", in, got, want)
		}
	}
}
