package tcp

import "sync/atomic"

// maxIdleServers is how many server goroutines wait for connections at
// most (each holds its stack, a few KiB, and a rawIO); more end when their
// connection does. A Mooncake initiator without its pool has up to
// threads x batch size connections open at once (512 in the suite).
const maxIdleServers = 1024

// servers hands accepted connections to server goroutines that outlive
// them: to one waiting, if any, else to a new one. A server's stack
// grows once to what serving needs and is kept with its raw I/O state,
// where a goroutine per connection started small and grew on each: a
// Mooncake initiator with its connection pool off (its default) opens one
// per request, and goroutine start, stack growth and exit were about a
// tenth of such a target's CPU (docs/DATAPATH-ROUNDS.md). Waiting servers cost
// no CPU; they end on Close.
type servers struct {
	handoff chan *targetConn // unbuffered: a send succeeds only to a waiting server
	idle    atomic.Int32     // servers waiting, or about to
	started atomic.Int64     // servers started, ever
}

// dispatch runs tc on a waiting server or a new one. The caller holds
// t.mu and has checked that t is up, so Close waits for the server.
func (t *Transport) dispatch(tc *targetConn) {
	select {
	case t.servers.handoff <- tc:
	default:
		t.wg.Add(1)
		t.servers.started.Add(1)
		go t.server(tc)
	}
}

// server serves tc, then what dispatch hands it, until t stops or enough
// servers wait already.
func (t *Transport) server(tc *targetConn) {
	defer t.wg.Done()
	var raw rawIO
	for {
		tc.serve(&raw)
		if t.servers.idle.Add(1) > maxIdleServers {
			t.servers.idle.Add(-1)
			return
		}
		select {
		case tc = <-t.servers.handoff:
			t.servers.idle.Add(-1)
		case <-t.stop:
			return
		}
	}
}
