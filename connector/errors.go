package connector

import (
	"fmt"

	"github.com/kvconnect/kvconnect/errdefs"
)

// Sentinel errors. They are package errdefs' sentinels, so errors.Is
// works whichever package a caller names them from.
var (
	ErrUnavailable      = errdefs.ErrUnavailable
	ErrInvalidArgument  = errdefs.ErrInvalidArgument
	ErrOutOfBounds      = errdefs.ErrOutOfBounds
	ErrUnknownRegion    = errdefs.ErrUnknownRegion
	ErrUnknownPeer      = errdefs.ErrUnknownPeer
	ErrPeerUnreachable  = errdefs.ErrPeerUnreachable
	ErrTimeout          = errdefs.ErrTimeout
	ErrCanceled         = errdefs.ErrCanceled
	ErrTransportCrashed = errdefs.ErrTransportCrashed
	ErrClosed           = errdefs.ErrClosed
	ErrNotSupported     = errdefs.ErrNotSupported
	ErrProtocol         = errdefs.ErrProtocol
	ErrPluginNotFound   = errdefs.ErrPluginNotFound
	ErrUnauthenticated  = errdefs.ErrUnauthenticated
	// ErrResourceExhausted means a bounded resource stayed full: a
	// handshake frame did not fit in max_handshake_memory in time.
	ErrResourceExhausted = errdefs.ErrResourceExhausted

	// ErrAddressOverlap means memory to register overlaps a registered
	// region (always together with ErrInvalidArgument).
	ErrAddressOverlap = errdefs.ErrAddressOverlap

	// ErrNoCommonTransport means the peer has none of the transports this
	// node has up.
	ErrNoCommonTransport = errdefs.ErrNoCommonTransport
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
