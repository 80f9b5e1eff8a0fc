// Package errdefs is kvconnect's error vocabulary: the sentinel errors
// that the connector, the plugin SDK and every transport wrap, each with a
// stable wire name, and the structured diagnosis of a transport that
// failed to start (InitError).
//
// It depends on nothing but the standard library, so every layer can
// import it. Errors are wrapped with %w and a name prefix; callers test
// them with errors.Is, never by matching their text. The mapping of these
// errors to gRPC statuses and back (so errors.Is still works after an
// error crossed a plugin's process boundary) lives apart, in the plugin
// protocol's own package.
package errdefs

import (
	"context"
	"errors"
	"fmt"
)

// Sentinel errors. Each has a stable wire name (see Kind).
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
	// ErrUnauthenticated means a peer did not prove it knows the shared
	// secret (or this node could not prove it to the peer).
	ErrUnauthenticated = errors.New("unauthenticated")
	// ErrNoCommonTransport means the peer has none of the transports this
	// node has up (Mooncake's NotSupportedTransport).
	ErrNoCommonTransport = errors.New("no transport in common with the peer")
	// ErrInternal is a bug: an invariant was broken.
	ErrInternal = errors.New("internal error")
	// ErrResourceExhausted means a bounded resource (the memory a node
	// keeps for handshake frames, say) stayed full for as long as the
	// request could wait.
	ErrResourceExhausted = errors.New("resource exhausted")
	// ErrAddressOverlap means memory to register overlaps memory already
	// registered (Mooncake's ERR_ADDRESS_OVERLAPPED). It always comes
	// wrapped together with ErrInvalidArgument.
	ErrAddressOverlap = errors.New("address range overlaps a registered region")
)

// kinds maps each sentinel to its stable wire name. The order is the
// order Kind tries them in.
var kinds = [...]struct {
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
	{"unauthenticated", ErrUnauthenticated},
	{"no_common_transport", ErrNoCommonTransport},
	{"internal", ErrInternal},
	{"resource_exhausted", ErrResourceExhausted},
	{"address_overlap", ErrAddressOverlap},
}

// Kind returns the stable wire name of the first sentinel err wraps, or ""
// if it wraps none.
func Kind(err error) string {
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

// Kinds returns the stable wire names of every sentinel err wraps.
func Kinds(err error) []string {
	var out []string
	if err == nil {
		return nil
	}
	for _, k := range kinds {
		if errors.Is(err, k.err) {
			out = append(out, k.name)
		}
	}
	return out
}

// KindNames lists every wire name, in Kind's order.
func KindNames() []string {
	out := make([]string, len(kinds))
	for i, k := range kinds {
		out[i] = k.name
	}
	return out
}

// FromKind returns the sentinel named by a wire kind, or nil.
func FromKind(kind string) error {
	for _, k := range kinds {
		if k.name == kind {
			return k.err
		}
	}
	return nil
}

// Remote rebuilds an error from wire kinds and a message produced on the
// other side of a process or network boundary: the result prints msg and
// errors.Is matches every sentinel named in kinds (unknown names are
// ignored). It returns nil when msg is empty and kinds name nothing.
func Remote(msg string, kinds ...string) error {
	var sentinels []error
	for _, k := range kinds {
		if s := FromKind(k); s != nil {
			sentinels = append(sentinels, s)
		}
	}
	if msg == "" && len(sentinels) == 0 {
		return nil
	}
	return &remoteError{msg: msg, sentinels: sentinels}
}

// Join returns an error that matches every sentinel named in kinds and
// prints the first one's text; nil when kinds name none. It rebuilds the
// wrapped chain of a diagnosis received over the wire.
func Join(kinds ...string) error {
	var sentinels []error
	for _, k := range kinds {
		if s := FromKind(k); s != nil {
			sentinels = append(sentinels, s)
		}
	}
	switch len(sentinels) {
	case 0:
		return nil
	case 1:
		return sentinels[0]
	}
	return &remoteError{msg: sentinels[0].Error(), sentinels: sentinels}
}

// remoteError is an error rebuilt from its wire form.
type remoteError struct {
	msg       string
	sentinels []error
}

func (e *remoteError) Error() string   { return e.msg }
func (e *remoteError) Unwrap() []error { return e.sentinels }

// FromContext maps a context's error to the sentinels: a deadline becomes
// ErrTimeout, a cancellation ErrCanceled; the context error stays in the
// chain too. Other errors are returned unchanged.
func FromContext(err error) error {
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
