//go:build !linux

package connector

import (
	"fmt"
	"os"
)

func dupCloexec(int) (int, error) {
	return -1, fmt.Errorf("connector: caller-owned regions need Linux: %w", ErrNotSupported)
}

func fileIdentity(*os.File) (viewKey, int64, error) {
	return viewKey{}, 0, fmt.Errorf("connector: caller-owned regions need Linux: %w", ErrNotSupported)
}
