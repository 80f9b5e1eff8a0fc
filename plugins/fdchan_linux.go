//go:build linux

package plugins

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// fdChannelPair returns the two ends of a SOCK_SEQPACKET socket pair: the
// host keeps the first and hands the second to the plugin process.
func fdChannelPair() (host *net.UnixConn, child *os.File, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("socketpair: %w", err)
	}
	hf := os.NewFile(uintptr(fds[0]), "kvconnect-fd-channel-host")
	defer hf.Close() // FileConn dups it
	c, err := net.FileConn(hf)
	if err != nil {
		unix.Close(fds[1])
		return nil, nil, fmt.Errorf("fd channel: %w", err)
	}
	return c.(*net.UnixConn), os.NewFile(uintptr(fds[1]), "kvconnect-fd-channel-plugin"), nil
}

// fdSender is the host's end: it sends a file descriptor tagged with a
// token; the RPC that uses the descriptor names the token.
type fdSender struct {
	mu   sync.Mutex
	conn *net.UnixConn
	seq  uint64
}

func (s *fdSender) send(f *os.File) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn == nil {
		return 0, fmt.Errorf("fd channel: %w", ErrClosed)
	}
	s.seq++
	var msg [8]byte
	binary.LittleEndian.PutUint64(msg[:], s.seq)
	if _, _, err := s.conn.WriteMsgUnix(msg[:], unix.UnixRights(int(f.Fd())), nil); err != nil {
		return 0, fmt.Errorf("fd channel: sending region descriptor: %w", err)
	}
	return s.seq, nil
}

// fdReceiver is the plugin's end.
type fdReceiver struct {
	mu    sync.Mutex
	conn  *net.UnixConn
	stash map[uint64]*os.File
}

func newFDReceiver(fd int) (*fdReceiver, error) {
	f := os.NewFile(uintptr(fd), "kvconnect-fd-channel")
	if f == nil {
		return nil, fmt.Errorf("fd channel: descriptor %d is not valid", fd)
	}
	defer f.Close()
	c, err := net.FileConn(f)
	if err != nil {
		return nil, fmt.Errorf("fd channel: descriptor %d: %w", fd, err)
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		c.Close()
		return nil, fmt.Errorf("fd channel: descriptor %d is not a unix socket", fd)
	}
	return &fdReceiver{conn: uc, stash: map[uint64]*os.File{}}, nil
}

// take returns the file sent with token, waiting up to timeout for it.
func (r *fdReceiver) take(token uint64, timeout time.Duration) (*os.File, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.conn == nil {
		return nil, fmt.Errorf("fd channel: %w", ErrClosed)
	}
	deadline := time.Now().Add(timeout)
	// Tokens only grow (the host sends descriptors in order), so a stashed
	// descriptor with an older token belongs to a registration whose call
	// never arrived: close it rather than keep its memory alive.
	for k, f := range r.stash {
		if k < token {
			f.Close()
			delete(r.stash, k)
		}
	}
	for {
		if f, ok := r.stash[token]; ok {
			delete(r.stash, token)
			return f, nil
		}
		var msg [8]byte
		oob := make([]byte, unix.CmsgSpace(4))
		r.conn.SetReadDeadline(deadline)
		n, oobn, _, _, err := r.conn.ReadMsgUnix(msg[:], oob)
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return nil, fmt.Errorf("fd channel: no descriptor for token %d within %v: %w", token, timeout, ErrTimeout)
			}
			return nil, fmt.Errorf("fd channel: %w", err)
		}
		if n != 8 {
			return nil, fmt.Errorf("fd channel: message of %d bytes: %w", n, ErrProtocol)
		}
		cmsgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil || len(cmsgs) != 1 {
			return nil, fmt.Errorf("fd channel: bad control message (%v): %w", err, ErrProtocol)
		}
		fds, err := unix.ParseUnixRights(&cmsgs[0])
		if err != nil || len(fds) != 1 {
			for _, fd := range fds {
				unix.Close(fd)
			}
			return nil, fmt.Errorf("fd channel: want one descriptor (%v): %w", err, ErrProtocol)
		}
		got := binary.LittleEndian.Uint64(msg[:])
		r.stash[got] = os.NewFile(uintptr(fds[0]), fmt.Sprintf("kvconnect-region-%d", got))
	}
}

func (r *fdReceiver) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.conn != nil {
		r.conn.Close()
		r.conn = nil
	}
	for k, f := range r.stash {
		f.Close()
		delete(r.stash, k)
	}
}

func (s *fdSender) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn != nil {
		s.conn.Close()
		s.conn = nil
	}
}
