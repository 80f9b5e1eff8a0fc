//go:build !linux

package callermem

// Share is not supported on this platform.
func Share(mem []byte) (*Lease, error) { return nil, ErrUnsupported }

// Held lists nothing on this platform.
func Held() (fd int, ranges []Range) { return -1, nil }

// Release does nothing on this platform (no lease exists).
func (l *Lease) Release() error { return nil }
