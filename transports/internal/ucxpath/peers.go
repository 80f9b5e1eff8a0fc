package ucxpath

import (
	"errors"
	"fmt"
	"os"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	ucxlib "github.com/kvconnect/kvconnect/internal/ucx"
	"github.com/kvconnect/kvconnect/plugins"
)

type epState uint8

// conn is the one UCP endpoint to a remote worker, shared by every role:
// the peers this node opened there and that worker as a client of this
// node's memory. UCX pairs the endpoints two workers create to each other
// by creation order (ucp_ep_match), so one endpoint per worker pair on
// each side keeps a client's RMA path and the owner's control path the
// same connection. A conn is closed only when it failed or at Close:
// closing an endpoint that UCX paired with one the other side still uses
// would break that side's connection.
type conn struct {
	key        string // the remote worker address
	ep         ucxlib.EP
	peerErrors bool
	state      epState
	err        error // set when the endpoint failed
	where      place // the remote process
	local      bool  // same host and pid namespace as this process
	peers      map[*peer]struct{}
	clients    map[*client]struct{}
}

// peer is a node this transport connected to (as a client of its memory).
type peer struct {
	id      plugins.PeerID // set by Connect under Transport.mu
	name    string
	client  uint64 // this node's client id at the peer
	remote  *remoteTable
	where   place
	welcome chan error // Connect waits on it; buffered

	// Progress-loop state.
	conn         *conn
	err          error // set when the peer failed, closed or was disconnected
	inflight     int   // op and flush slots in flight
	lastProgress time.Time
	welcomed     bool
	live         map[liveRegion]bool
	closing      bool // torn down: drain, say bye, destroy rkeys
	drained      bool // the endpoint flush after teardown completed
	released     bool
}

// client is a node that connected to this one (the owner side).
type client struct {
	id   uint64
	conn *conn
}

// connTo returns the open connection to a remote worker, creating it with
// the configured error handling. In auto mode a process on this host that
// shares the pid namespace gets none when the context has shared-memory
// lanes: UCX 1.13's posix and sysv lanes have no peer failure handler, so
// asking for one makes UCX carry the (active-message emulated) RMA over
// tcp instead, several times slower; such a peer's death is noticed by its
// pid instead. Other peers try peer error handling first.
func (l *loop) connTo(addr []byte, where place) (*conn, error) {
	if c := l.conns[string(addr)]; c != nil && c.usable() == nil {
		return c, nil
	}
	local := l.here.samePIDs(where)
	var ep ucxlib.EP
	var err error
	peerErrors := false
	switch {
	case l.opts.ErrorMode == "peer":
		peerErrors = true
		ep, err = l.w.Connect(addr, true)
	case l.opts.ErrorMode == "none" || l.sharedMemoryOnly || local && l.sharedMemory:
		ep, err = l.w.Connect(addr, false)
	default:
		if ep, err = l.w.Connect(addr, true); err == nil {
			peerErrors = true
		} else if ep2, err2 := l.w.Connect(addr, false); err2 == nil {
			ep, err = ep2, nil
		}
	}
	if err != nil {
		return nil, err
	}
	c := &conn{key: string(addr), ep: ep, peerErrors: peerErrors, state: epOpen, where: where, local: local,
		peers: map[*peer]struct{}{}, clients: map[*client]struct{}{}}
	l.conns[c.key] = c
	l.byEP[ep] = c
	return c, nil
}

// connFailed: UCX reported the endpoint failed (peer error handling).
// Every peer on it fails, every client on it is gone, and the endpoint is
// closed forcibly, as UCX requires for a failed endpoint.
func (l *loop) connFailed(c *conn, err error) {
	if c.err != nil {
		return
	}
	c.err = fmt.Errorf("connection failed: %w", err)
	l.log.Debug(l.name+": endpoint failed", zap.Error(err), zap.Int("peers", len(c.peers)), zap.Int("clients", len(c.clients)))
	for p := range c.peers {
		if p.err == nil {
			p.err = fmt.Errorf("%s: peer %s: %w", l.name, p.name, c.err)
		}
	}
	for cl := range c.clients {
		l.dropClient(cl)
	}
	l.closeConn(c, true)
	l.issue()
}

// closeConn closes c's endpoint; force is only used for failed endpoints
// (UCX requires it) and unresponsive peers: over UCX 1.13's tcp lanes a
// live peer answers emulated PUTs and GETs, and a reply that finds its
// endpoint gone aborts the peer's process (ucs_fatal in
// ucp_request_try_send), so live endpoints close in flush mode.
func (l *loop) closeConn(c *conn, force bool) {
	if c.state != epOpen {
		return
	}
	c.state = epClosing
	if l.conns[c.key] == c {
		delete(l.conns, c.key)
	}
	force = force && c.peerErrors
	ep := c.ep
	l.ctl(func(s uint32) ucxlib.Status { return l.w.CloseEP(s, ep, force) }, func(ucxlib.Status) {
		c.state = epClosed
		delete(l.byEP, ep)
		// UCX has completed every request on the endpoint.
		for p := range c.peers {
			l.destroyRkeys(p)
		}
	})
}

func (l *loop) destroyRkeys(p *peer) {
	for _, rr := range p.remote.Values() {
		if rr.rkey != 0 {
			l.w.DestroyRkey(rr.rkey)
			rr.rkey = 0
		}
	}
}

func (l *loop) openPeer(p *peer, worker []byte) error {
	c, err := l.connTo(worker, p.where)
	if err != nil {
		return fmt.Errorf("%s: connecting to %s: %w", l.name, p.name, err)
	}
	p.conn = c
	c.peers[p] = struct{}{}
	l.peers[p.client] = p
	for _, rr := range p.remote.Values() {
		rk, err := l.w.UnpackRkey(c.ep, rr.packed)
		if err != nil {
			err = fmt.Errorf("%s: peer %s region %d: %w", l.name, p.name, rr.id, err)
			l.teardownPeer(p, err)
			return err
		}
		rr.rkey = rk
	}
	p.live = map[liveRegion]bool{}
	l.send(c, message{typ: msgHello, client: p.client, where: l.here, worker: l.address}, func(st ucxlib.Status) {
		if st != ucxlib.OK {
			l.connectFailed(p, fmt.Errorf("%s: hello to %s: %w", l.name, p.name, st.Error("ucp_am_send_nbx")))
		}
	})
	return nil
}

func (l *loop) connectFailed(p *peer, err error) {
	if !p.welcomed {
		p.welcomed = true
		p.welcome <- err
	}
}

// teardownPeer stops issuing to p, waits for its ops in flight (an
// endpoint flush), then says bye and destroys its rkeys. The endpoint
// stays: it is shared (see conn).
func (l *loop) teardownPeer(p *peer, err error) {
	if p.closing {
		return
	}
	p.closing = true
	if p.err == nil {
		p.err = err
	}
	l.connectFailed(p, err)
	delete(l.peers, p.client)
	if p.conn == nil { // never connected
		return
	}
	l.issue() // fail its queued ops now
	if p.conn.usable() != nil {
		p.drained = true // the endpoint's close completes what is in flight
		l.maybeRelease(p)
		return
	}
	l.flush(p.conn, func(ucxlib.Status) {
		p.drained = true
		l.maybeRelease(p)
	})
}

// maybeRelease finishes a torn-down peer once nothing of it is in flight.
func (l *loop) maybeRelease(p *peer) {
	if !p.closing || !p.drained || p.inflight > 0 || p.released {
		return
	}
	p.released = true
	c := p.conn
	if c.usable() == nil {
		l.send(c, message{typ: msgBye, client: p.client}, nil)
		l.destroyRkeys(p)
		delete(c.peers, p)
	}
	// Otherwise the endpoint is closing: its close destroys the rkeys.
}

// failPeer fails the ops in flight to a peer that made no progress for
// op_timeout or whose process exited. With peer error handling its
// endpoint is closed forcibly, which completes UCX's requests; otherwise
// the ops are reported failed and their slots (and local regions) stay
// held until UCX lets go.
func (l *loop) failPeer(p *peer, err error) {
	if p.err == nil {
		p.err = err
	}
	l.log.Warn(l.name+": failing a peer's ops in flight", zap.String("peer", p.name), zap.Int("inflight", p.inflight), zap.Error(err))
	if p.conn.peerErrors {
		l.connFailed(p.conn, err)
	}
	for s := range l.slots {
		sl := &l.slots[s]
		if sl.p != p || sl.abandoned {
			continue
		}
		switch sl.kind {
		case slotOp:
			sl.abandoned = true
			b := sl.b
			// The batch ends now, UCX's request does not: the slot keeps
			// the local region until UCX is done with it (opDone), so a
			// DeregisterRegion waits for it and the memory stays mapped.
			sl.held, b.local[sl.i] = b.local[sl.i], nil
			b.inflight--
			b.res[sl.i].Err = fmt.Errorf("%s: %s to %s: %w", l.name, b.ops[sl.i].Kind, p.name, p.err)
			l.maybeFinish(b)
			l.busyDec(p)
		case slotFlush:
			sl.abandoned = true
			sl.fn = nil
			b := sl.b
			b.flushing = false
			l.failWrites(b, fmt.Errorf("%s: WRITE to %s not confirmed: %w", l.name, p.name, p.err))
			l.finishBatch(b)
			l.busyDec(p)
		}
	}
	p.lastProgress = time.Now()
	l.issue()
}

func (l *loop) dropClient(cl *client) {
	if l.clients[cl.id] == cl {
		delete(l.clients, cl.id)
	}
	delete(cl.conn.clients, cl)
	for _, rv := range l.revokes {
		if rv.waiting[cl.id] == cl {
			delete(rv.waiting, cl.id)
			l.checkRevoke(rv)
		}
	}
}

// clientGone reports whether a client can no longer reach this node.
func (l *loop) clientGone(cl *client) bool {
	return cl.conn.err != nil || processGone(cl.conn)
}

// processGone reports whether the process at the other end of a
// connection without peer error handling, on this host and in this pid
// namespace, has exited: the way to notice a dead peer on UCX's
// shared-memory lanes.
func processGone(c *conn) bool {
	if c.peerErrors || !c.local || c.where.pid == 0 || int(c.where.pid) == os.Getpid() {
		return false
	}
	return errors.Is(unix.Kill(int(c.where.pid), 0), unix.ESRCH)
}

// usable says why nothing can be sent on c, or nil.
func (c *conn) usable() error {
	switch {
	case c.err != nil:
		return c.err
	case c.state != epOpen:
		return fmt.Errorf("endpoint closed: %w", plugins.ErrPeerUnreachable)
	}
	return nil
}
