package connector

import (
	"errors"
	"fmt"

	"github.com/kvconnect/kvconnect/plugins"
)

// Sentinel errors. They are the SDK's sentinels (package plugins), so
// errors.Is works whichever package a caller names them from.
var (
	ErrUnavailable      = plugins.ErrUnavailable
	ErrInvalidArgument  = plugins.ErrInvalidArgument
	ErrOutOfBounds      = plugins.ErrOutOfBounds
	ErrUnknownRegion    = plugins.ErrUnknownRegion
	ErrUnknownPeer      = plugins.ErrUnknownPeer
	ErrPeerUnreachable  = plugins.ErrPeerUnreachable
	ErrTimeout          = plugins.ErrTimeout
	ErrCanceled         = plugins.ErrCanceled
	ErrTransportCrashed = plugins.ErrTransportCrashed
	ErrClosed           = plugins.ErrClosed
	ErrNotSupported     = plugins.ErrNotSupported
	ErrProtocol         = plugins.ErrProtocol
	ErrPluginNotFound   = plugins.ErrPluginNotFound

	// ErrNoCommonTransport means the peer has none of the transports this
	// node has up (Mooncake's NotSupportedTransport).
	ErrNoCommonTransport = errors.New("no transport in common with the peer")
)

// BatchError reports a batch in which some ops failed. It unwraps to the
// first failure, so errors.Is(err, ErrOutOfBounds) and the like work.
type BatchError struct {
	Failed int   // ops that did not complete
	Total  int   // ops in the batch
	First  error // the first failure, in op order
	Index  int   // index of the first failed op
}

func (e *BatchError) Error() string {
	return fmt.Sprintf("connector: %d of %d ops failed; first (op %d): %v", e.Failed, e.Total, e.Index, e.First)
}

func (e *BatchError) Unwrap() error { return e.First }
