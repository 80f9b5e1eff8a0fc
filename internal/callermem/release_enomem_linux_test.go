//go:build linux

package callermem

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestReleaseThatCannotMoveBackKeepsTheData: when Release cannot move the
// memory back to private pages (here the address-space limit refuses the
// temporary mapping; in the field memory short or vm.max_map_count), it
// says so and the memory keeps its contents: it stays the arena's
// mapping, held. Before, the arena's pages were freed under it anyway,
// and the caller's data read as zeros. Run in a child process: the
// lowered limit must not meet the Go runtime of the test binary.
func TestReleaseThatCannotMoveBackKeepsTheData(t *testing.T) {
	if os.Getenv("CALLERMEM_RELEASE_CHILD") == "1" {
		releaseUnderALimit()
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestReleaseThatCannotMoveBackKeepsTheData$", "-test.count=1")
	cmd.Env = append(os.Environ(), "CALLERMEM_RELEASE_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	var zeros, pages int
	var relErr string
	for _, line := range strings.Split(string(out), "\n") {
		if rest, ok := strings.CutPrefix(line, "RESULT "); ok {
			f := strings.SplitN(rest, " ", 3)
			zeros, _ = strconv.Atoi(f[0])
			pages, _ = strconv.Atoi(f[1])
			relErr = f[2]
		}
	}
	if pages == 0 {
		t.Fatalf("the child reported nothing:\n%s", out)
	}
	t.Logf("Release: %s", relErr)
	if relErr == "<nil>" {
		t.Fatal("Release under the limit said nothing: the test did not make it fail")
	}
	if zeros != 0 {
		t.Fatalf("%d of %d pages read as zeros after a Release that could not move them back", zeros, pages)
	}
}

func releaseUnderALimit() {
	const size = 32 << 20
	mem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		panic(err)
	}
	for i := range mem {
		mem[i] = 0xAB
	}
	l, err := Share(mem)
	if err != nil {
		panic(err)
	}
	var old unix.Rlimit
	unix.Getrlimit(unix.RLIMIT_AS, &old)
	lim := old
	lim.Cur = vmSize() + 8<<20 // room for the runtime, not for a 32 MiB copy
	if err := unix.Setrlimit(unix.RLIMIT_AS, &lim); err != nil {
		panic(err)
	}
	rerr := l.Release()
	unix.Setrlimit(unix.RLIMIT_AS, &old)
	zeros := 0
	for pg := 0; pg < size; pg += pageSize {
		if mem[pg] == 0 {
			zeros++
		}
	}
	fmt.Printf("RESULT %d %d %v\n", zeros, size/pageSize, rerr)
}

func vmSize() uint64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		panic(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmSize:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10
		}
	}
	panic("no VmSize")
}
