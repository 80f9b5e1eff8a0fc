//go:build !linux

package shm

import "os"

// New is not supported on this platform.
func New(name string, size int) (*Segment, error) { return nil, ErrUnsupported }

// Map is not supported on this platform.
func Map(f *os.File, offset uint64, size int) (*Segment, error) { return nil, ErrUnsupported }

func unmap(mem []byte) error { return ErrUnsupported }

// CheckShareable is not supported on this platform.
func CheckShareable(f *os.File, offset uint64, size int) error { return ErrUnsupported }
