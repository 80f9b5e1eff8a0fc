//go:build !linux

package pluginrpc

import (
	"fmt"
	"net"
	"os"
	"time"

	"github.com/kvconnect/kvconnect/errdefs"
)

// FDChannelPair needs Linux (SOCK_SEQPACKET and SCM_RIGHTS).
func FDChannelPair() (*net.UnixConn, *os.File, error) {
	return nil, nil, fmt.Errorf("fd channel: subprocess transports need Linux: %w", errdefs.ErrNotSupported)
}

// FDSender is the host's end of the fd channel (Linux only).
type FDSender struct{}

// NewFDSender wraps the host's end of the channel.
func NewFDSender(*net.UnixConn) *FDSender { return &FDSender{} }

// Send is not supported on this platform.
func (s *FDSender) Send(*os.File) (uint64, error) {
	return 0, fmt.Errorf("fd channel: %w", errdefs.ErrNotSupported)
}

// Close does nothing.
func (s *FDSender) Close() {}

// FDReceiver is the plugin's end of the fd channel (Linux only).
type FDReceiver struct{}

// NewFDReceiver is not supported on this platform.
func NewFDReceiver(int) (*FDReceiver, error) {
	return nil, fmt.Errorf("fd channel: %w", errdefs.ErrNotSupported)
}

// NewFDReceiverFile is not supported on this platform.
func NewFDReceiverFile(*os.File) (*FDReceiver, error) {
	return nil, fmt.Errorf("fd channel: %w", errdefs.ErrNotSupported)
}

// Take is not supported on this platform.
func (r *FDReceiver) Take(uint64, time.Duration) (*os.File, error) {
	return nil, fmt.Errorf("fd channel: %w", errdefs.ErrNotSupported)
}

// Drop does nothing.
func (r *FDReceiver) Drop(uint64) {}

// Close does nothing.
func (r *FDReceiver) Close() {}
