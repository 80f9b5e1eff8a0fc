package connector

import "time"

// SetRestartBackoff replaces the restart schedule for a test and returns
// a function that puts it back.
func SetRestartBackoff(d []time.Duration) func() {
	old := restartBackoff
	restartBackoff = d
	return func() { restartBackoff = old }
}

// SetCloseTimeout replaces the bound on closing one transport for a test
// and returns a function that puts it back.
func SetCloseTimeout(d time.Duration) func() {
	old := closeTimeout
	closeTimeout = d
	return func() { closeTimeout = old }
}

// RegionLockHeld reports whether some call holds c's region lock.
func RegionLockHeld(c *Connector) bool { return len(c.regLock) == 1 }

// MarkPeerStale marks p's link broken, as a lost connection does: its
// next batch reconnects.
func MarkPeerStale(p *Peer) {
	p.mu.Lock()
	at, id := p.at, p.id
	p.mu.Unlock()
	p.markStale(at, id, ErrPeerUnreachable)
}

// PeerReconnecting reports whether a reconnect of p is under way.
func PeerReconnecting(p *Peer) bool { return len(p.refresh) == 1 }

// SetAfterDeliver makes every node run f between delivering a notification
// and answering it, for a test, and returns a function that puts it back.
func SetAfterDeliver(f func(*Connector)) func() {
	old := testAfterDeliver.Swap(&f)
	return func() { testAfterDeliver.Store(old) }
}

// Closing is closed when c's Shutdown begins.
func Closing(c *Connector) <-chan struct{} { return c.closing }
