//go:build !linux

package host

import (
	"fmt"
	"os"

	"github.com/kvconnect/kvconnect/errdefs"
)

// fileKey identifies a file however many descriptors name it.
type fileKey struct{ dev, ino uint64 }

// fileID needs Linux.
func fileID(f *os.File) (fileKey, uint64, error) {
	return fileKey{}, 0, fmt.Errorf("file identity of %s: %w", f.Name(), errdefs.ErrNotSupported)
}
