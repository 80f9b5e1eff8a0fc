package connector

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/kvconnect/kvconnect/internal/ratelog"
	"github.com/kvconnect/kvconnect/metrics"
)

// rpcServer answers handshake requests on the RPC port: kvconnect's and
// unmodified Mooncake Transfer Engines'. Every connection is served by its
// own goroutine and must deliver its whole request within
// handshakeTimeout, so idle, slow or hostile clients cannot hold the port
// against real peers: when maxHandshakeConns connections are open, the one
// that has waited longest for its request is dropped to make room. A
// request's memory comes from the node's frameBudget as its bytes arrive,
// so however many connections announce large frames, the node holds at
// most max_handshake_memory for them, and small requests (every real
// descriptor request) always find room.
type rpcServer struct {
	c    *Connector
	ln   net.Listener
	max  int
	log  *zap.Logger
	warn *ratelog.Limiter

	mu    sync.Mutex
	conns map[net.Conn]time.Time // accepted connections still reading their request, and when they came
	busy  map[net.Conn]bool      // connections whose request was read (being answered)
	wg    sync.WaitGroup
}

// Limits of the handshake server.
const (
	// maxHandshakeConns bounds the connections open at once.
	maxHandshakeConns = 4096
	// handshakeTimeout bounds receiving one request (Mooncake's server
	// gives a client 5 s too) and, separately, writing its reply.
	handshakeTimeout = 5 * time.Second
	// acceptBackoffMax bounds the wait between accept retries after an
	// error such as EMFILE.
	acceptBackoffMax = time.Second
)

func newRPCServer(c *Connector, ln net.Listener) *rpcServer {
	return &rpcServer{c: c, ln: ln, max: c.cfg.MaxHandshakeFrame, log: c.log, warn: ratelog.New(c.log, 10*time.Second),
		conns: map[net.Conn]time.Time{}, busy: map[net.Conn]bool{}}
}

func (s *rpcServer) serve() {
	defer s.wg.Done()
	backoff := time.Duration(0)
	for {
		nc, err := s.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// EMFILE, ENFILE, ENOBUFS, ECONNABORTED...: the listener is
			// fine; wait and accept again.
			backoff = min(max(2*backoff, 5*time.Millisecond), acceptBackoffMax)
			s.warn.Warn("accept", "handshake listener: accept failed; retrying", zap.Error(err), zap.Duration("backoff", backoff))
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		s.mu.Lock()
		if s.conns == nil {
			s.mu.Unlock()
			nc.Close()
			return
		}
		if len(s.conns)+len(s.busy) >= maxHandshakeConns {
			s.evictLocked()
		}
		s.conns[nc] = time.Now()
		s.wg.Add(1)
		s.mu.Unlock()
		go s.handle(nc)
	}
}

// evictLocked drops the connection that has waited longest for its
// request.
func (s *rpcServer) evictLocked() {
	var oldest net.Conn
	var since time.Time
	for nc, t := range s.conns {
		if oldest == nil || t.Before(since) {
			oldest, since = nc, t
		}
	}
	if oldest != nil {
		delete(s.conns, oldest)
		oldest.Close()
		s.warn.Warn("evict", "too many handshake connections at once; dropping the one that waited longest for its request",
			zap.String("remote", oldest.RemoteAddr().String()), zap.Duration("waited", time.Since(since)), zap.Int("limit", maxHandshakeConns))
	}
}

func (s *rpcServer) handle(nc net.Conn) {
	defer s.wg.Done()
	defer func() {
		nc.Close()
		s.mu.Lock()
		delete(s.conns, nc)
		delete(s.busy, nc)
		s.mu.Unlock()
	}()
	start := time.Now()
	nc.SetDeadline(start.Add(handshakeTimeout))
	r, ok := s.open(nc)
	if !ok {
		return
	}
	// The request's memory comes from the node's budget as its bytes
	// arrive; waiting for room is bounded by the request's own deadline.
	ctx, cancel := requestContext(start)
	f, err := s.c.frames.readFrame(ctx, r, s.max, true)
	cancel()
	if f != nil {
		defer f.release()
	}
	s.mu.Lock()
	if _, ok := s.conns[nc]; !ok {
		s.mu.Unlock()
		return // evicted, or cut by close while it was still being read
	}
	delete(s.conns, nc)
	if s.busy != nil {
		s.busy[nc] = true
	}
	s.mu.Unlock()
	nc.SetWriteDeadline(time.Now().Add(handshakeTimeout))
	if errors.Is(err, ErrResourceExhausted) {
		s.c.observe().HandshakeRefused(metrics.HandshakeNoMemory)
		s.warn.Warn("no-memory", "refused a handshake request: no room in max_handshake_memory within the request's timeout (many large requests at once: a flood?)",
			zap.String("remote", nc.RemoteAddr().String()), zap.Error(err))
		s.replyError(nc, err)
		lingerClose(nc)
		return
	}
	if err != nil {
		s.warn.Info("bad-request", "dropped a handshake connection that sent no complete request", zap.String("remote", nc.RemoteAddr().String()), zap.Error(err))
		if errors.Is(err, ErrProtocol) {
			s.c.observe().HandshakeRefused(metrics.HandshakeBadRequest)
			s.replyError(nc, err)
		}
		return
	}
	typ, body := f.typ, f.body
	var req requestBody
	if err := json.Unmarshal(body, &req); err != nil {
		s.c.observe().HandshakeRefused(metrics.HandshakeBadRequest)
		// Mooncake's server closes on a body that is not JSON; kvconnect's
		// requests are always JSON, so an error frame harms no one.
		s.replyError(nc, fmt.Errorf("connector: handshake request of type %d: body is not JSON: %v: %w", typ, err, ErrProtocol))
		return
	}
	kv := req.KVConnect != nil
	switch typ {
	case frameMetadata:
		b, err := json.Marshal(s.c.descriptor())
		if err != nil {
			s.replyError(nc, err)
			return
		}
		if len(b)+1 > s.max {
			s.replyError(nc, fmt.Errorf("connector: descriptor of %d bytes exceeds max_handshake_frame %d (too many regions?): %w", len(b), s.max, ErrInvalidArgument))
			return
		}
		if !kv {
			s.c.log.Debug("serving a Mooncake peer's metadata request", zap.String("remote", nc.RemoteAddr().String()))
		}
		// Building a descriptor of many regions takes a while on a loaded
		// host: the write's own bound starts once it is built.
		nc.SetWriteDeadline(time.Now().Add(handshakeTimeout))
		writeFrame(nc, frameMetadata, b)
	case frameNotify:
		n := Notification{Name: req.Name, Msg: req.NotifyMsg}
		if kv {
			n.From = req.KVConnect.Session
		}
		if err := s.c.deliver(n); err != nil {
			if kv {
				s.replyError(nc, err)
			} else {
				writeFrame(nc, frameNotify, marshal(notifyReply{})) // an empty notify_msg is Mooncake's failure
			}
			return
		}
		if f := testAfterDeliver.Load(); f != nil {
			(*f)(s.c)
		}
		writeFrame(nc, frameNotify, marshal(notifyReply{NotifyMsg: "success"}))
	case frameProbe:
		writeFrame(nc, frameProbe, marshal(probeReply{Status: "success", Name: s.c.session, Time: time.Now().UTC().Format(time.RFC3339Nano)}))
	case frameConnect:
		// Mooncake's RDMA queue-pair handshake: say why it cannot work.
		s.warn.Warn("mooncake-rdma", "a Mooncake RDMA peer tried to connect; kvconnect serves Mooncake peers over TCP only",
			zap.String("remote", nc.RemoteAddr().String()))
		writeFrame(nc, frameConnect, marshal(connectReply{QPNum: []int{},
			ReplyMsg: fmt.Sprintf("%s is a kvconnect node: it serves Mooncake peers over Mooncake's TCP transport only (no RDMA queue pairs); start this Mooncake node with protocol tcp (MC_FORCE_TCP=1)", s.c.session)}))
	default:
		if kv {
			s.replyError(nc, fmt.Errorf("connector: unknown handshake request type %d: %w", typ, ErrProtocol))
		}
	}
}

func (s *rpcServer) replyError(nc net.Conn, err error) {
	writeFrame(nc, frameError, marshal(errorReply{Error: err.Error(), Kind: kindOf(err)}))
}

// testAfterDeliver, when set by a test, runs between a notification's
// delivery and its answer.
var testAfterDeliver atomic.Pointer[func(*Connector)]

// closeGrace bounds how long close lets requests already read be
// answered before it cuts their connections.
const closeGrace = time.Second

// close stops the server. Connections still reading their request are
// cut; a request already read is answered first (a notification the
// application has received gets its "success", so the sender does not
// see an error for a message that arrived), for at most closeGrace or
// until ctx ends, whichever is first.
func (s *rpcServer) close(ctx context.Context) {
	s.ln.Close()
	s.mu.Lock()
	idle := make([]net.Conn, 0, len(s.conns))
	for nc := range s.conns {
		idle = append(idle, nc)
	}
	s.conns = nil // serve closes what it accepts from now on
	s.mu.Unlock()
	for _, nc := range idle {
		nc.Close()
	}
	done := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(done)
	}()
	grace := time.NewTimer(closeGrace)
	defer grace.Stop()
	select {
	case <-done:
		return
	case <-grace.C:
	case <-ctx.Done():
	}
	s.mu.Lock()
	busy := make([]net.Conn, 0, len(s.busy))
	for nc := range s.busy {
		busy = append(busy, nc)
	}
	s.busy = nil
	s.mu.Unlock()
	for _, nc := range busy {
		nc.Close()
	}
	<-done
}
