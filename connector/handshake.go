package connector

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"go.uber.org/zap"
)

// The P2P handshake runs on the connector's RPC port, framed as Mooncake
// frames it: a u64 little-endian length (covering the type byte and the
// JSON body), a u8 type, then JSON. One request and one reply per
// connection.
const (
	frameConnect  byte = 0
	frameMetadata byte = 1
	frameNotify   byte = 2
	frameProbe    byte = 3
	frameReply    byte = 0x80 // OR'ed with the request type in a good reply
	frameError    byte = 0xFF // reply: {"error": "...", "kind": "..."}
)

// frame reading and writing ----------------------------------------------

func writeFrame(w io.Writer, typ byte, body []byte) error {
	buf := make([]byte, 9+len(body))
	binary.LittleEndian.PutUint64(buf, uint64(1+len(body)))
	buf[8] = typ
	copy(buf[9:], body)
	_, err := w.Write(buf)
	return err
}

// readFrame reads one frame of at most max bytes (type + body).
func readFrame(r io.Reader, max int) (byte, []byte, error) {
	var hdr [9]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	n, err := decodeFrameHeader(hdr[:], max)
	if err != nil {
		return 0, nil, err
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return 0, nil, err
	}
	return hdr[8], body, nil
}

// decodeFrameHeader validates the 9-byte frame header and returns the body
// length.
func decodeFrameHeader(hdr []byte, max int) (int, error) {
	if len(hdr) < 9 {
		return 0, fmt.Errorf("connector: handshake frame header of %d bytes: %w", len(hdr), ErrProtocol)
	}
	n := binary.LittleEndian.Uint64(hdr)
	if n == 0 {
		return 0, fmt.Errorf("connector: handshake frame of length 0: %w", ErrProtocol)
	}
	if n > uint64(max) {
		return 0, fmt.Errorf("connector: handshake frame of %d bytes exceeds max_handshake_frame %d: %w", n, max, ErrProtocol)
	}
	return int(n - 1), nil
}

type errorReply struct {
	Error string `json:"error"`
	Kind  string `json:"kind,omitempty"`
}

type probeReply struct {
	Name string `json:"name"`
	Time string `json:"time"`
}

// rpcServer answers handshake requests on the RPC port.
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
	switch typ {
	case frameMetadata, frameConnect:
		d := s.c.descriptor()
		b, err := json.Marshal(d)
		if err != nil {
			s.replyError(nc, err)
			return
		}
		if len(b)+1 > s.max {
			s.replyError(nc, fmt.Errorf("connector: descriptor of %d bytes exceeds max_handshake_frame %d (too many regions?): %w", len(b), s.max, ErrInvalidArgument))
			return
		}
		writeFrame(nc, typ|frameReply, b)
	case frameNotify:
		var n Notification
		if err := json.Unmarshal(body, &n); err != nil {
			s.replyError(nc, fmt.Errorf("connector: malformed notification: %v: %w", err, ErrProtocol))
			return
		}
		if err := s.c.deliver(n); err != nil {
			s.replyError(nc, err)
			return
		}
		writeFrame(nc, typ|frameReply, []byte("{}"))
	case frameProbe:
		b, _ := json.Marshal(probeReply{Name: s.c.session, Time: time.Now().UTC().Format(time.RFC3339Nano)})
		writeFrame(nc, typ|frameReply, b)
	default:
		s.replyError(nc, fmt.Errorf("connector: unknown handshake request type %d: %w", typ, ErrProtocol))
	}
}

func (s *rpcServer) replyError(nc net.Conn, err error) {
	b, _ := json.Marshal(errorReply{Error: err.Error(), Kind: kindOf(err)})
	writeFrame(nc, frameError, b)
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

// request sends one handshake request to session and returns the reply body.
func request(ctx context.Context, session string, typ byte, body []byte, max int) ([]byte, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", session)
	if err != nil {
		return nil, fmt.Errorf("connector: handshake with %s: %v: %w", session, err, ErrPeerUnreachable)
	}
	defer nc.Close()
	if dl, ok := ctx.Deadline(); ok {
		nc.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { nc.SetDeadline(time.Now()) })
	defer stop()
	if err := writeFrame(nc, typ, body); err != nil {
		return nil, handshakeIOError(ctx, session, err)
	}
	rt, rb, err := readFrame(nc, max)
	if err != nil {
		if errors.Is(err, ErrProtocol) {
			return nil, fmt.Errorf("connector: handshake with %s: %w", session, err)
		}
		return nil, handshakeIOError(ctx, session, err)
	}
	switch rt {
	case typ | frameReply:
		return rb, nil
	case frameError:
		var er errorReply
		if err := json.Unmarshal(rb, &er); err != nil {
			return nil, fmt.Errorf("connector: handshake with %s: malformed error reply: %w", session, ErrProtocol)
		}
		return nil, remoteError(session, er)
	}
	return nil, fmt.Errorf("connector: handshake with %s: reply type %d to request type %d: %w", session, rt, typ, ErrProtocol)
}

func handshakeIOError(ctx context.Context, session string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("connector: handshake with %s: %w", session, contextError(ctx.Err()))
	}
	return fmt.Errorf("connector: handshake with %s: %v: %w", session, err, ErrPeerUnreachable)
}
