//go:build linux

package pluginrpc

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kvconnect/kvconnect/errdefs"
	"github.com/kvconnect/kvconnect/internal/fdlimit"
)

func channel(t *testing.T) (*FDSender, *FDReceiver) {
	t.Helper()
	host, child, err := FDChannelPair()
	if err != nil {
		t.Fatal(err)
	}
	defer child.Close()
	r, err := NewFDReceiverFile(child)
	if err != nil {
		t.Fatal(err)
	}
	s := NewFDSender(host)
	t.Cleanup(func() { s.Close(); r.Close() })
	return s, r
}

func TestFDChannelTokensAndDrop(t *testing.T) {
	s, r := channel(t)
	before := fdlimit.OpenCount()
	var tokens []uint64
	for i := 0; i < 3; i++ {
		tok, err := s.Send(os.Stdin)
		if err != nil {
			t.Fatal(err)
		}
		tokens = append(tokens, tok)
	}
	if tokens[0] != 1 || tokens[2] != 3 {
		t.Fatalf("tokens %v, want 1, 2, 3", tokens)
	}
	f, err := r.Take(2, time.Second) // stashes 1 on the way
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	r.Drop(1) // stashed, never taken
	r.Drop(9) // never sent: nothing happens
	f, err = r.Take(3, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if after := fdlimit.OpenCount(); after != before {
		t.Fatalf("%d descriptors open after the exchange, %d before", after, before)
	}
	if _, err := r.Take(4, 10*time.Millisecond); !errors.Is(err, errdefs.ErrTimeout) {
		t.Fatalf("Take of a token never sent: %v, want ErrTimeout", err)
	}
}

// TestFDChannelSaysEMFILE: a receiver at its descriptor limit gets the
// message with its descriptor dropped by the kernel (MSG_CTRUNC); the
// error says EMFILE and the limit instead of "bad control message".
func TestFDChannelSaysEMFILE(t *testing.T) {
	s, r := channel(t)
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	open := fdlimit.OpenCount()
	limit := uint64(open + 4)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: limit, Max: old.Max}); err != nil {
		t.Fatal(err)
	}
	defer syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old)
	var fill []int
	defer func() {
		for _, fd := range fill {
			unix.Close(fd)
		}
	}()
	for {
		fd, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			break
		}
		fill = append(fill, fd)
	}
	tok, err := s.Send(os.Stdin)
	if err != nil {
		t.Fatalf("Send: %v", err)
	}
	_, err = r.Take(tok, time.Second)
	// Room again, for the explanation's own look at /proc/self/fd.
	unix.Close(fill[0])
	fill = fill[1:]
	if err == nil {
		t.Fatal("Take succeeded although the process had no descriptor left")
	}
	msg := err.Error()
	for _, want := range []string{"EMFILE", "RLIMIT_NOFILE " + strconv.FormatUint(limit, 10), "token 1", "MSG_CTRUNC"} {
		if !strings.Contains(msg, want) {
			t.Errorf("%q does not say %q", msg, want)
		}
	}
	if !errors.Is(err, unix.EMFILE) || !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("%v does not match EMFILE and ErrUnavailable", err)
	}
}
