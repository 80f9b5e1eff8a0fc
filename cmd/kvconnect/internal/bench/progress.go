package bench

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// IsTerminal reports whether w is a terminal (for the live progress line).
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && isTerminal(f)
}

// Progress writes one \r-updated status line to a terminal. A nil
// *Progress does nothing, which is what callers use when output is piped.
type Progress struct {
	mu   sync.Mutex
	w    io.Writer
	last int
}

// NewProgress returns a progress line on w, or nil (quiet) when w is not a
// terminal.
func NewProgress(w io.Writer) *Progress {
	if !IsTerminal(w) {
		return nil
	}
	return &Progress{w: w}
}

// Set replaces the line.
func (p *Progress) Set(format string, args ...any) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, "\r"+format+"\x1b[K", args...)
	p.last = 1
}

// Clear erases the line.
func (p *Progress) Clear() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.last != 0 {
		fmt.Fprint(p.w, "\r\x1b[K")
		p.last = 0
	}
}

// ticker calls f every interval until stop is closed; the returned
// function stops it and waits.
func (p *Progress) ticker(interval time.Duration, f func()) (stop func()) {
	if p == nil {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				f()
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}
