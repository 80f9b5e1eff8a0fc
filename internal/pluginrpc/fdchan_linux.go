//go:build linux

package pluginrpc

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kvconnect/kvconnect/errdefs"
	"github.com/kvconnect/kvconnect/internal/fdlimit"
)

// FDChannelPair returns the two ends of a SOCK_SEQPACKET socket pair that
// carries region file descriptors: the host keeps the first and hands the
// second to the plugin process.
func FDChannelPair() (host *net.UnixConn, child *os.File, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("socketpair: %w", fdlimit.Explain(err))
	}
	hf := os.NewFile(uintptr(fds[0]), "kvconnect-fd-channel-host")
	defer hf.Close() // FileConn dups it
	c, err := net.FileConn(hf)
	if err != nil {
		unix.Close(fds[1])
		return nil, nil, fmt.Errorf("fd channel: %w", fdlimit.Explain(err))
	}
	return c.(*net.UnixConn), os.NewFile(uintptr(fds[1]), "kvconnect-fd-channel-plugin"), nil
}

// FDSender is the host's end: it sends a file descriptor tagged with a
// token; the RPC that uses the descriptor names the token. Tokens grow by
// one with every send. It is safe for concurrent use.
type FDSender struct {
	mu   sync.Mutex
	conn *net.UnixConn
	seq  uint64
}

// NewFDSender wraps the host's end of the channel.
func NewFDSender(c *net.UnixConn) *FDSender { return &FDSender{conn: c} }

// Send sends f's descriptor and returns its token.
func (s *FDSender) Send(f *os.File) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn == nil {
		return 0, fmt.Errorf("fd channel: %w", errdefs.ErrClosed)
	}
	s.seq++
	var msg [8]byte
	binary.LittleEndian.PutUint64(msg[:], s.seq)
	if _, _, err := s.conn.WriteMsgUnix(msg[:], unix.UnixRights(int(f.Fd())), nil); err != nil {
		return 0, fmt.Errorf("fd channel: sending descriptor %d (token %d): %w: %w", f.Fd(), s.seq, fdlimit.Explain(err), errdefs.ErrUnavailable)
	}
	return s.seq, nil
}

// FDReceiver is the plugin's end. It is safe for concurrent use.
type FDReceiver struct {
	mu    sync.Mutex
	conn  *net.UnixConn
	stash map[uint64]*os.File
}

// NewFDReceiver opens the plugin's end from an inherited descriptor,
// which it takes over.
func NewFDReceiver(fd int) (*FDReceiver, error) {
	f := os.NewFile(uintptr(fd), "kvconnect-fd-channel")
	if f == nil {
		return nil, fmt.Errorf("fd channel: descriptor %d is not valid", fd)
	}
	defer f.Close()
	return NewFDReceiverFile(f)
}

// NewFDReceiverFile opens the plugin's end from f, which it duplicates:
// the caller keeps f and may close it.
func NewFDReceiverFile(f *os.File) (*FDReceiver, error) {
	c, err := net.FileConn(f)
	if err != nil {
		return nil, fmt.Errorf("fd channel: descriptor %d: %w", f.Fd(), err)
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		c.Close()
		return nil, fmt.Errorf("fd channel: descriptor %d is not a unix socket", f.Fd())
	}
	return &FDReceiver{conn: uc, stash: map[uint64]*os.File{}}, nil
}

// Take returns the file sent with token, waiting up to timeout for it.
func (r *FDReceiver) Take(token uint64, timeout time.Duration) (*os.File, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.conn == nil {
		return nil, fmt.Errorf("fd channel: %w", errdefs.ErrClosed)
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
		n, oobn, flags, _, err := r.conn.ReadMsgUnix(msg[:], oob)
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return nil, fmt.Errorf("fd channel: no descriptor for token %d within %v: %w", token, timeout, errdefs.ErrTimeout)
			}
			return nil, fmt.Errorf("fd channel: %w", fdlimit.Explain(err))
		}
		if n != 8 {
			return nil, fmt.Errorf("fd channel: message of %d bytes: %w", n, errdefs.ErrProtocol)
		}
		if flags&unix.MSG_CTRUNC != 0 {
			// The kernel could not install the descriptor in this process
			// (EMFILE) and dropped it: say so, with the numbers.
			got := binary.LittleEndian.Uint64(msg[:])
			closeRights(oob[:oobn])
			return nil, fmt.Errorf("fd channel: %w: %w", fdlimit.Dropped(fmt.Sprintf("the descriptor with token %d", got)), errdefs.ErrUnavailable)
		}
		cmsgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil || len(cmsgs) != 1 {
			return nil, fmt.Errorf("fd channel: bad control message (%v): %w", err, errdefs.ErrProtocol)
		}
		fds, err := unix.ParseUnixRights(&cmsgs[0])
		if err != nil || len(fds) != 1 {
			for _, fd := range fds {
				unix.Close(fd)
			}
			return nil, fmt.Errorf("fd channel: want one descriptor (%v): %w", err, errdefs.ErrProtocol)
		}
		got := binary.LittleEndian.Uint64(msg[:])
		r.stash[got] = os.NewFile(uintptr(fds[0]), fmt.Sprintf("kvconnect-region-%d", got))
	}
}

// Drop closes the descriptor sent with token if it arrived and was never
// taken (the host released a file before any registration used it).
// Descriptors that have not arrived yet are left for Take's clean-up.
func (r *FDReceiver) Drop(token uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if f, ok := r.stash[token]; ok {
		f.Close()
		delete(r.stash, token)
	}
}

// closeRights closes every descriptor a (possibly truncated) control
// message carries.
func closeRights(oob []byte) {
	cmsgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return
	}
	for i := range cmsgs {
		fds, _ := unix.ParseUnixRights(&cmsgs[i])
		for _, fd := range fds {
			unix.Close(fd)
		}
	}
}

// Close closes the channel and every descriptor received but not taken.
func (r *FDReceiver) Close() {
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

// Close closes the host's end; the plugin sees its end close.
func (s *FDSender) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn != nil {
		s.conn.Close()
		s.conn = nil
	}
}
