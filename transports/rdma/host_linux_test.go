//go:build linux

package rdma

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// ReadMemlock against the kernel's own account in /proc/self/limits and
// capget(2).
func TestReadMemlockReal(t *testing.T) {
	m := ReadMemlock()
	t.Logf("memlock: %s", m)
	if m.Err != "" {
		t.Fatal(m.Err)
	}
	b, err := os.ReadFile("/proc/self/limits")
	if err != nil {
		t.Fatal(err)
	}
	var soft, hard string
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "Max locked memory"); ok {
			f := strings.Fields(rest)
			if len(f) < 2 {
				t.Fatalf("odd limits line %q", line)
			}
			soft, hard = f[0], f[1]
		}
	}
	check := func(name, want string, got uint64, unlimited bool) {
		if want == "unlimited" {
			if !unlimited {
				t.Errorf("%s: /proc says unlimited, got %d", name, got)
			}
			return
		}
		n, err := strconv.ParseUint(want, 10, 64)
		if err != nil || unlimited || n != got {
			t.Errorf("%s: /proc says %s, got %d (unlimited %v)", name, want, got, unlimited)
		}
	}
	check("soft", soft, m.Soft, m.SoftUnlimited)
	check("hard", hard, m.Hard, m.HardUnlimited)

	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		t.Fatal(err)
	}
	if want := data[0].Effective&(1<<capIPCLock) != 0; m.CapIPCLock != want {
		t.Errorf("CapIPCLock = %v, capget says %v", m.CapIPCLock, want)
	}
}
