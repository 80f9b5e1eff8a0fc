package plugins

import (
	"fmt"
	"sync"
)

// Guard is the lifecycle state every transport keeps: new, initialising,
// up, closed. It gives the errors the Transport contract asks for, so a
// transport need not write them by hand:
//
//	func (t *T) Init(ctx context.Context, req plugins.InitRequest) (plugins.InitResult, error) {
//		if err := t.guard.BeginInit(Name); err != nil {
//			return plugins.InitResult{}, err
//		}
//		res, err := t.bringUp(ctx, req)
//		if err := t.guard.EndInit(Name, err == nil); err != nil {
//			t.tearDown() // Close came while Init ran
//			return plugins.InitResult{}, err
//		}
//		return res, err
//	}
//
// The zero value is a new transport. It is safe for concurrent use.
type Guard struct {
	mu    sync.Mutex
	state guardState
}

type guardState int

const (
	guardNew guardState = iota
	guardIniting
	guardUp
	guardClosed
)

// BeginInit starts Init: it fails with ErrInvalidArgument when Init was
// already called (and is running or succeeded), with ErrClosed after
// Close. name prefixes the errors. On success call EndInit.
func (g *Guard) BeginInit(name string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch g.state {
	case guardIniting, guardUp:
		return fmt.Errorf("%s: Init called twice: %w", name, ErrInvalidArgument)
	case guardClosed:
		return fmt.Errorf("%s: Init after Close: %w", name, ErrClosed)
	}
	g.state = guardIniting
	return nil
}

// EndInit ends Init: up when ok, new again otherwise (a failed Init may be
// retried). It returns ErrClosed when Close was called while Init ran:
// Init must then release what it set up and fail.
func (g *Guard) EndInit(name string, ok bool) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.state == guardClosed {
		if ok {
			return fmt.Errorf("%s: closed during Init: %w", name, ErrClosed)
		}
		return nil
	}
	if ok {
		g.state = guardUp
	} else {
		g.state = guardNew
	}
	return nil
}

// Up returns nil when the transport is up, else the error a call must
// fail with: ErrNotInitialized before Init succeeded, ErrClosed after
// Close.
func (g *Guard) Up(name string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch g.state {
	case guardUp:
		return nil
	case guardClosed:
		return fmt.Errorf("%s: %w", name, ErrClosed)
	}
	return fmt.Errorf("%s: %w", name, ErrNotInitialized)
}

// Closed reports whether Close has begun.
func (g *Guard) Closed() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.state == guardClosed
}

// BeginClose marks the transport closed. first is false when Close had
// already begun (Close is idempotent: return nil then); wasUp says whether
// Init had succeeded, i.e. whether there is anything to release.
func (g *Guard) BeginClose() (first, wasUp bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.state == guardClosed {
		return false, false
	}
	wasUp = g.state == guardUp
	g.state = guardClosed
	return true, wasUp
}
