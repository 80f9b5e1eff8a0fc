package connector

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"go.uber.org/zap"
)

// rpcServer answers handshake requests on the RPC port: kvconnect's and
// unmodified Mooncake Transfer Engines'.
type rpcServer struct {
	c   *Connector
	ln  net.Listener
	max int
	log *zap.Logger

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// maxHandshakeConns bounds the handshake connections served at once; more
// are closed at accept, so a flood cannot make the node buffer unbounded
// frames.
const maxHandshakeConns = 64

func (s *rpcServer) serve() {
	defer s.wg.Done()
	for {
		nc, err := s.ln.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				s.log.Warn("handshake listener stopped", zap.Error(err))
			}
			return
		}
		s.mu.Lock()
		if s.conns == nil {
			s.mu.Unlock()
			nc.Close()
			return
		}
		if len(s.conns) >= maxHandshakeConns {
			s.mu.Unlock()
			s.log.Warn("too many handshake connections at once; refusing one", zap.String("remote", nc.RemoteAddr().String()), zap.Int("limit", maxHandshakeConns))
			nc.Close()
			continue
		}
		s.conns[nc] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.handle(nc)
	}
}

func (s *rpcServer) handle(nc net.Conn) {
	defer s.wg.Done()
	defer func() {
		nc.Close()
		s.mu.Lock()
		delete(s.conns, nc)
		s.mu.Unlock()
	}()
	nc.SetDeadline(time.Now().Add(30 * time.Second))
	typ, body, err := readFrame(nc, s.max)
	if err != nil {
		s.log.Debug("bad handshake request", zap.String("remote", nc.RemoteAddr().String()), zap.Error(err))
		if errors.Is(err, ErrProtocol) {
			s.replyError(nc, err)
		}
		return
	}
	var req requestBody
	if err := json.Unmarshal(body, &req); err != nil {
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
		writeFrame(nc, frameNotify, marshal(notifyReply{NotifyMsg: "success"}))
	case frameProbe:
		writeFrame(nc, frameProbe, marshal(probeReply{Status: "success", Name: s.c.session, Time: time.Now().UTC().Format(time.RFC3339Nano)}))
	case frameConnect:
		// Mooncake's RDMA queue-pair handshake: say why it cannot work.
		s.c.log.Warn("a Mooncake RDMA peer tried to connect; kvconnect serves Mooncake peers over TCP only",
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

func (s *rpcServer) close() {
	s.ln.Close()
	s.mu.Lock()
	conns := s.conns
	s.conns = nil
	s.mu.Unlock()
	for nc := range conns {
		nc.Close()
	}
	s.wg.Wait()
}
