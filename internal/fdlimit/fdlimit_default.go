//go:build !linux

package fdlimit

import "errors"

// Explain returns err unchanged on this platform.
func Explain(err error) error { return err }

// ExplainMmap returns err unchanged on this platform.
func ExplainMmap(err error) error { return err }

// Dropped is the error for a descriptor the kernel dropped on its way in.
func Dropped(what string) error {
	return errors.New("fdlimit: " + what + " was dropped on its way into this process")
}

// Status is not known on this platform.
func Status() string { return "descriptor counts unknown on this platform" }

// OpenCount is not known on this platform.
func OpenCount() int { return -1 }

// MapCount is not known on this platform.
func MapCount() int { return -1 }
