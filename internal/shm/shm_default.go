//go:build !linux

package shm

import "os"

// New is not supported on this platform.
func New(name string, size int) (*Segment, error) { return nil, ErrUnsupported }

// NewLazy is not supported on this platform.
func NewLazy(name string, size int) (*Segment, error) { return nil, ErrUnsupported }

// Map is not supported on this platform.
func Map(f *os.File, offset uint64, size int) (*Segment, error) { return nil, ErrUnsupported }

// MapView is not supported on this platform.
func MapView(f *os.File, size int) (*Segment, error) { return nil, ErrUnsupported }

// MapViewAt is not supported on this platform.
func MapViewAt(f *os.File, offset uint64, size int) (*Segment, error) { return nil, ErrUnsupported }

// Populate does nothing on this platform.
func Populate(mem []byte) error { return nil }

// Punch is not supported on this platform.
func Punch(f *os.File, off, size uint64) error { return ErrUnsupported }

// PageSize is the usual page size.
func PageSize() int { return 4096 }

func unmap(mem []byte) error { return ErrUnsupported }

// CheckShareable is not supported on this platform.
func CheckShareable(f *os.File, offset uint64, size int) error { return ErrUnsupported }

// ShmemHuge: no huge pages for shared memory on this platform.
func ShmemHuge() (setting string, huge bool, ok bool) { return "", false, false }

// AdviseHuge does nothing on this platform.
func AdviseHuge(mem []byte) {}
