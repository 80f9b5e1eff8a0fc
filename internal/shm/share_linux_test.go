//go:build linux

package shm

import (
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func memfd(t *testing.T, flags int, size int64, seals int) *os.File {
	t.Helper()
	fd, err := unix.MemfdCreate("sharetest", flags|unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "memfd:sharetest")
	t.Cleanup(func() { f.Close() })
	if err := unix.Ftruncate(fd, size); err != nil {
		t.Fatal(err)
	}
	if seals != 0 {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

func TestCheckShareable(t *testing.T) {
	disk, err := os.CreateTemp(t.TempDir(), "region")
	if err != nil {
		t.Fatal(err)
	}
	defer disk.Close()
	disk.Truncate(1 << 20)
	var sfs unix.Statfs_t
	unix.Fstatfs(int(disk.Fd()), &sfs)
	if int64(sfs.Type) == unix.TMPFS_MAGIC {
		t.Skipf("%s is on tmpfs on this host: no disk file system to refuse", os.TempDir())
	}
	shmFile, err := os.CreateTemp("/dev/shm", "kvconnect-sharetest-")
	if err != nil {
		t.Fatalf("/dev/shm: %v", err)
	}
	defer os.Remove(shmFile.Name())
	defer shmFile.Close()
	shmFile.Truncate(1 << 20)

	for _, tc := range []struct {
		name   string
		f      *os.File
		off    uint64
		size   int
		reason string // "" = accepted
	}{
		{"sealed memfd", memfd(t, unix.MFD_ALLOW_SEALING, 1<<20, unix.F_SEAL_SHRINK), 4096 + 13, 64 << 10, ""},
		{"tmpfs file", shmFile, 0, 1 << 20, ""},
		{"disk file", disk, 0, 4096, "not shared memory"},
		{"unsealed memfd", memfd(t, unix.MFD_ALLOW_SEALING, 1<<20, 0), 0, 4096, "not sealed"},
		{"memfd without sealing", memfd(t, 0, 1<<20, 0), 0, 4096, "MFD_ALLOW_SEALING"},
		{"range past the end", memfd(t, unix.MFD_ALLOW_SEALING, 1<<20, unix.F_SEAL_SHRINK), 1<<20 - 10, 11, "runs past its end"},
		{"empty range", memfd(t, unix.MFD_ALLOW_SEALING, 1<<20, unix.F_SEAL_SHRINK), 0, 0, "out of range"},
	} {
		err := CheckShareable(tc.f, tc.off, tc.size)
		switch {
		case tc.reason == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.name, err)
		case tc.reason != "" && (err == nil || !strings.Contains(err.Error(), tc.reason)):
			t.Errorf("%s: got %v, want a refusal saying %q", tc.name, err, tc.reason)
		}
	}
}
