//go:build !linux

package ring

import (
	"fmt"
	"os"

	"github.com/kvconnect/kvconnect/errdefs"
)

// Doorbell is Linux's eventfd doorbell (doorbell_linux.go); rings are
// not used on this platform.
type Doorbell struct{}

// NewDoorbell is not supported on this platform.
func NewDoorbell() (*Doorbell, error) {
	return nil, fmt.Errorf("ring: doorbell: %w", errdefs.ErrNotSupported)
}

// OpenDoorbell is not supported on this platform; it closes f.
func OpenDoorbell(f *os.File) (*Doorbell, error) {
	f.Close()
	return nil, fmt.Errorf("ring: doorbell: %w", errdefs.ErrNotSupported)
}

// File returns nil.
func (d *Doorbell) File() *os.File { return nil }

// Ring does nothing.
func (d *Doorbell) Ring() {}

// Wait fails.
func (d *Doorbell) Wait() error { return fmt.Errorf("ring: doorbell: %w", errdefs.ErrNotSupported) }

// Interrupt does nothing.
func (d *Doorbell) Interrupt() {}

// Close does nothing.
func (d *Doorbell) Close() {}
