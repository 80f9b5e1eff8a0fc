package plugins

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors shared by the connector, the SDK and every transport.
// Errors are wrapped with %w and a name prefix; callers test them with
// errors.Is. Errors that cross the plugin's gRPC boundary are mapped to a
// kind and back (see grpcerrors.go), so errors.Is works on the host too.
var (
	// ErrUnavailable means this transport cannot run on this host (missing
	// hardware, library, driver or permission). It drives the fallback chain.
	ErrUnavailable = errors.New("transport unavailable on this host")
	// ErrInvalidArgument is bad input from the caller or from configuration.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrOutOfBounds is an op that reaches outside a registered region.
	ErrOutOfBounds = errors.New("out of bounds of registered region")
	// ErrUnknownRegion names a region id or address that is not registered.
	ErrUnknownRegion = errors.New("unknown region")
	// ErrUnknownPeer names a peer handle that is not connected.
	ErrUnknownPeer = errors.New("unknown peer")
	// ErrPeerUnreachable means the peer could not be reached or the
	// connection to it broke.
	ErrPeerUnreachable = errors.New("peer unreachable")
	// ErrTimeout means an op or a call did not finish within its timeout.
	ErrTimeout = errors.New("timed out")
	// ErrCanceled means the caller canceled the op.
	ErrCanceled = errors.New("canceled")
	// ErrTransportCrashed means the transport plugin process exited while
	// work was in flight.
	ErrTransportCrashed = errors.New("transport plugin crashed")
	// ErrClosed means the transport or connector was closed.
	ErrClosed = errors.New("closed")
	// ErrNotInitialized means a call came before Init succeeded.
	ErrNotInitialized = errors.New("transport not initialized")
	// ErrNotSupported means the operation or platform is not supported.
	ErrNotSupported = errors.New("not supported")
	// ErrProtocol is a violation of a wire protocol by a peer.
	ErrProtocol = errors.New("protocol error")
	// ErrPluginNotFound means no plugin binary was found in any search path.
	ErrPluginNotFound = errors.New("plugin binary not found")
	// ErrPluginStart means the plugin binary could not be started or exited
	// before it completed the handshake.
	ErrPluginStart = errors.New("plugin failed to start")
	// ErrHandshake means the plugin answered the handshake wrongly (cookie,
	// protocol version, timeout).
	ErrHandshake = errors.New("plugin handshake failed")
	// ErrInternal is a bug: an invariant was broken.
	ErrInternal = errors.New("internal error")
)

// kinds maps each sentinel to the stable name used on the wire.
var kinds = []struct {
	name string
	err  error
}{
	{"unavailable", ErrUnavailable},
	{"invalid_argument", ErrInvalidArgument},
	{"out_of_bounds", ErrOutOfBounds},
	{"unknown_region", ErrUnknownRegion},
	{"unknown_peer", ErrUnknownPeer},
	{"peer_unreachable", ErrPeerUnreachable},
	{"timeout", ErrTimeout},
	{"canceled", ErrCanceled},
	{"transport_crashed", ErrTransportCrashed},
	{"closed", ErrClosed},
	{"not_initialized", ErrNotInitialized},
	{"not_supported", ErrNotSupported},
	{"protocol", ErrProtocol},
	{"plugin_not_found", ErrPluginNotFound},
	{"plugin_start", ErrPluginStart},
	{"handshake", ErrHandshake},
	{"internal", ErrInternal},
}

// ErrorKinds returns the stable wire names of every sentinel err wraps.
func ErrorKinds(err error) []string {
	var out []string
	for _, k := range kinds {
		if err != nil && errors.Is(err, k.err) {
			out = append(out, k.name)
		}
	}
	return out
}

// ErrorKind returns the stable wire name of the first sentinel err wraps,
// or "" if it wraps none.
func ErrorKind(err error) string {
	if err == nil {
		return ""
	}
	for _, k := range kinds {
		if errors.Is(err, k.err) {
			return k.name
		}
	}
	return ""
}

// SentinelForKind returns the sentinel named by a wire kind, or nil.
func SentinelForKind(kind string) error {
	for _, k := range kinds {
		if k.name == kind {
			return k.err
		}
	}
	return nil
}

// remoteError is an error rebuilt on one side of the plugin boundary from
// a kind and a message produced on the other side.
type remoteError struct {
	msg      string
	sentinel error
}

func (e *remoteError) Error() string { return e.msg }
func (e *remoteError) Unwrap() error { return e.sentinel }

// NewRemoteError rebuilds an error from its wire kind and message: the
// result prints msg and errors.Is matches the sentinel of kind.
func NewRemoteError(kind, msg string) error {
	if kind == "" && msg == "" {
		return nil
	}
	return &remoteError{msg: msg, sentinel: SentinelForKind(kind)}
}

// InitError is the structured diagnosis of a transport that failed to
// initialise: which transport, which step, the native code, the cause in
// words and what to do about it. It wraps a sentinel (usually
// ErrUnavailable) so errors.Is drives the fallback chain.
type InitError struct {
	Transport  string   // transport name, e.g. "rdma"
	Step       string   // one of the Step* constants
	NativeCode int64    // errno or library return code; 0 if none
	NativeName string   // symbolic name of NativeCode, e.g. "ENOSYS", "FI_ENODATA"
	Cause      string   // what went wrong, in words
	Hints      []string // what to do about it
	Err        error    // wrapped sentinel or underlying error
}

// Steps at which a transport's initialisation can fail.
const (
	StepFindPlugin      = "find plugin"
	StepStartPlugin     = "start plugin"
	StepHandshake       = "handshake with plugin"
	StepLoadLibrary     = "load library"
	StepProbeDevices    = "probe devices"
	StepOpenDevice      = "open device"
	StepBind            = "bind"
	StepRegisterMemory  = "register memory"
	StepPublish         = "publish descriptor"
	StepConfigure       = "configure"
	StepDataPath        = "data path"
	StepInitPluginCrash = "init (plugin crashed)"
)

func (e *InitError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s failed", e.Transport, e.Step)
	if e.NativeCode != 0 || e.NativeName != "" {
		b.WriteString(" (")
		if e.NativeName != "" {
			b.WriteString(e.NativeName)
			if e.NativeCode != 0 {
				b.WriteString(" ")
			}
		}
		if e.NativeCode != 0 {
			fmt.Fprintf(&b, "%d", e.NativeCode)
		}
		b.WriteString(")")
	}
	b.WriteString(": ")
	b.WriteString(e.Cause)
	return b.String()
}

func (e *InitError) Unwrap() error { return e.Err }

// ContextError maps a context's error to the SDK's sentinels: a deadline
// becomes ErrTimeout, a cancellation ErrCanceled; the context error stays
// in the chain too.
func ContextError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%w: %w", ErrTimeout, err)
	case errors.Is(err, context.Canceled):
		return fmt.Errorf("%w: %w", ErrCanceled, err)
	}
	return err
}
