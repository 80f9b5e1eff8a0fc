package connector

import (
	"os"
	"strings"
)

// hostID names this host and the namespaces shared memory between
// processes needs (IPC for shared-memory segments, PID for cross-memory
// attach): the kernel's boot id plus the IPC and PID namespace inodes. ""
// when they cannot be read, which makes no peer look local.
func hostID() string {
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	parts := []string{strings.TrimSpace(string(boot))}
	for _, ns := range []string{"ipc", "pid"} {
		l, err := os.Readlink("/proc/self/ns/" + ns)
		if err != nil {
			return ""
		}
		parts = append(parts, l)
	}
	return strings.Join(parts, "/")
}
