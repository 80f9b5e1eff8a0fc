package shm

import (
	"os"
	"strconv"
	"testing"
)

func TestNewAndMapShareMemory(t *testing.T) {
	s, err := New("test", 3*4096)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// Map the same file again at an unaligned offset, as a plugin would.
	f, err := os.OpenFile("/proc/self/fd/"+strconv.Itoa(int(s.File().Fd())), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	m, err := Map(f, 4096+10, 100)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	m.Bytes()[0] = 0xab
	m.Bytes()[99] = 0xcd
	if s.Bytes()[4096+10] != 0xab || s.Bytes()[4096+109] != 0xcd {
		t.Fatal("writes through the second mapping are not visible in the first")
	}
	if len(m.Bytes()) != 100 || cap(m.Bytes()) != 100 {
		t.Fatalf("mapped slice len %d cap %d, want 100", len(m.Bytes()), cap(m.Bytes()))
	}
	if _, err := Map(f, 3*4096-10, 100); err == nil {
		t.Fatal("mapping past the end of the file succeeded")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if s.Bytes() != nil || s.File() != nil {
		t.Fatal("segment still exposes memory after Close")
	}
}

func TestNewRejectsBadSize(t *testing.T) {
	for _, n := range []int{0, -1, MaxSize + 1} {
		if _, err := New("bad", n); err == nil {
			t.Errorf("New(%d) succeeded", n)
		}
	}
}

// TestSizeIsSealed: whoever holds a segment's descriptor (a plugin) cannot
// shrink it under the host's mapping, and Map refuses unsealed files.
func TestSizeIsSealed(t *testing.T) {
	s, err := New("sealed", 8192)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.File().Truncate(0); err == nil {
		t.Fatal("a holder of the descriptor shrank the segment")
	}
	s.Bytes()[8191] = 1 // still mapped and writable
	f, err := os.CreateTemp(t.TempDir(), "plain")
	if err != nil {
		t.Fatal(err)
	}
	f.Truncate(8192)
	if m, err := Map(f, 0, 8192); err == nil {
		m.Close()
		t.Fatal("Map accepted a file whose size is not sealed")
	}
	f.Close()
}
