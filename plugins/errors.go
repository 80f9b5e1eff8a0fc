package plugins

import "github.com/kvconnect/kvconnect/errdefs"

// Sentinel errors a transport wraps (with %w and its name as a prefix) so
// the host can tell failures apart with errors.Is. They are the sentinels
// of package errdefs: the same values whichever package names them, and
// they keep matching after crossing the plugin's process boundary.
var (
	ErrUnavailable      = errdefs.ErrUnavailable      // cannot run on this host: drives the fallback chain
	ErrInvalidArgument  = errdefs.ErrInvalidArgument  // bad input from the caller or the configuration
	ErrOutOfBounds      = errdefs.ErrOutOfBounds      // an op reaching outside a registered region
	ErrUnknownRegion    = errdefs.ErrUnknownRegion    // a region id or address that is not registered
	ErrUnknownPeer      = errdefs.ErrUnknownPeer      // a peer handle that is not connected
	ErrPeerUnreachable  = errdefs.ErrPeerUnreachable  // the peer cannot be reached, or its connection broke
	ErrTimeout          = errdefs.ErrTimeout          // an op or call did not finish in time
	ErrCanceled         = errdefs.ErrCanceled         // the caller canceled
	ErrTransportCrashed = errdefs.ErrTransportCrashed // the plugin process died with work in flight
	ErrClosed           = errdefs.ErrClosed           // the transport was closed
	ErrNotInitialized   = errdefs.ErrNotInitialized   // a call before Init succeeded
	ErrNotSupported     = errdefs.ErrNotSupported     // the operation or platform is not supported
	ErrProtocol         = errdefs.ErrProtocol         // a peer broke a wire protocol
	ErrUnauthenticated  = errdefs.ErrUnauthenticated  // a peer did not prove it knows the shared secret
	ErrInternal         = errdefs.ErrInternal         // a bug: an invariant was broken
)

// InitError is the structured diagnosis a transport returns from Init
// when it cannot start: the step that failed, the native code, the cause
// in words and hints. Its Err wraps a sentinel, usually ErrUnavailable,
// which makes the host's fallback chain move on to the next transport.
type InitError = errdefs.InitError

// Steps at which a transport's initialisation can fail (InitError.Step).
const (
	StepLoadLibrary    = errdefs.StepLoadLibrary
	StepProbeDevices   = errdefs.StepProbeDevices
	StepOpenDevice     = errdefs.StepOpenDevice
	StepBind           = errdefs.StepBind
	StepRegisterMemory = errdefs.StepRegisterMemory
	StepPublish        = errdefs.StepPublish
	StepConfigure      = errdefs.StepConfigure
	StepDataPath       = errdefs.StepDataPath
)

// ContextError maps a context's error to the sentinels: a deadline
// becomes ErrTimeout, a cancellation ErrCanceled (the context error stays
// in the chain).
func ContextError(err error) error { return errdefs.FromContext(err) }
