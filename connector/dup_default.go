//go:build !linux

package connector

import "fmt"

func dupCloexec(int) (int, error) {
	return -1, fmt.Errorf("connector: caller-owned regions need Linux: %w", ErrNotSupported)
}
