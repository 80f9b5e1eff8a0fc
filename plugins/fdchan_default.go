//go:build !linux

package plugins

import (
	"fmt"
	"net"
	"os"
	"time"
)

func fdChannelPair() (*net.UnixConn, *os.File, error) {
	return nil, nil, fmt.Errorf("fd channel: subprocess transports need Linux: %w", ErrNotSupported)
}

type fdSender struct{ conn *net.UnixConn }

func (s *fdSender) send(f *os.File) (uint64, error) {
	return 0, fmt.Errorf("fd channel: %w", ErrNotSupported)
}

type fdReceiver struct{}

func newFDReceiver(fd int) (*fdReceiver, error) {
	return nil, fmt.Errorf("fd channel: %w", ErrNotSupported)
}

func (r *fdReceiver) take(token uint64, timeout time.Duration) (*os.File, error) {
	return nil, fmt.Errorf("fd channel: %w", ErrNotSupported)
}

func (r *fdReceiver) close() {}

func (s *fdSender) close() {}
