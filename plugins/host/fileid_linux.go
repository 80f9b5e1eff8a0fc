//go:build linux

package host

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// fileKey identifies a file however many descriptors name it.
type fileKey struct{ dev, ino uint64 }

// fileID is f's identity and size.
func fileID(f *os.File) (fileKey, uint64, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return fileKey{}, 0, fmt.Errorf("fstat %s: %w", f.Name(), err)
	}
	return fileKey{dev: uint64(st.Dev), ino: st.Ino}, uint64(st.Size), nil
}
