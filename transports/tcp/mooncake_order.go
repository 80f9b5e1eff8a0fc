package tcp

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// mooncakeOrder gives Mooncake's TCP protocol v1 the read-after-write
// order its peers rely on. In v1 a WRITE has no acknowledgment: the
// initiator counts it complete once it left its socket, and may then READ
// the same bytes on another connection. Mooncake's own server, one thread
// serving every connection, handles bytes in the order they arrive, so
// the READ sees the WRITE. Here each connection has its own goroutine: a
// v1 READ therefore waits until no other Mooncake connection is reading a
// WRITE's payload or has unread bytes in its socket (a request that
// arrived first), bounded so that a stalled peer cannot hold it. Protocol
// v2 needs none of this: its WRITE completes only when the target says
// the payload is in memory.
type mooncakeOrder struct {
	mu    sync.Mutex
	ln    net.Listener // its accept queue may hold a connection carrying a WRITE
	conns map[*mcConn]struct{}
	tick  chan struct{} // closed (and replaced) when a WRITE ends
}

// mcConn is one Mooncake connection being served.
type mcConn struct {
	nc      net.Conn
	writing atomic.Bool // a WRITE's payload is being read
}

// orderWaitMax bounds how long a v1 READ waits for other connections.
const orderWaitMax = 20 * time.Millisecond

func (o *mooncakeOrder) add(nc net.Conn) *mcConn {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.conns == nil {
		o.conns = map[*mcConn]struct{}{}
		o.tick = make(chan struct{})
	}
	c := &mcConn{nc: nc}
	o.conns[c] = struct{}{}
	return c
}

// listen sets the listener whose accept queue counts as pending input.
func (o *mooncakeOrder) listen(ln net.Listener) {
	o.mu.Lock()
	o.ln = ln
	o.mu.Unlock()
}

func (o *mooncakeOrder) remove(c *mcConn) {
	o.mu.Lock()
	_, ok := o.conns[c]
	delete(o.conns, c)
	o.mu.Unlock()
	if ok {
		o.wrote()
	}
}

// wrote wakes the READs waiting for WRITEs.
func (o *mooncakeOrder) wrote() {
	o.mu.Lock()
	if o.tick != nil {
		close(o.tick)
		o.tick = make(chan struct{})
	}
	o.mu.Unlock()
}

// pending reports whether a connection other than self has a WRITE in
// progress or unread input, and returns the channel to wait on.
func (o *mooncakeOrder) pending(self *mcConn) (bool, <-chan struct{}) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.ln != nil && acceptPending(o.ln) {
		return true, o.tick // a connection not accepted yet
	}
	for c := range o.conns {
		if c != self && (c.writing.Load() || unreadBytes(c.nc) > 0) {
			return true, o.tick
		}
	}
	return false, nil
}

// waitForWrites holds a v1 READ until the WRITEs that arrived before it
// are in memory, for at most min(orderWaitMax, limit).
func (o *mooncakeOrder) waitForWrites(self *mcConn, limit time.Duration) {
	t := time.NewTimer(min(orderWaitMax, limit))
	defer t.Stop()
	poll := time.NewTicker(100 * time.Microsecond) // unread input arrives with no event of ours
	defer poll.Stop()
	for {
		busy, tick := o.pending(self)
		if !busy {
			return
		}
		select {
		case <-tick:
		case <-poll.C:
		case <-t.C:
			return
		}
	}
}
