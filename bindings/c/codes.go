package main

import (
	"encoding/json"
	"errors"
	"net"

	"github.com/kvconnect/kvconnect/connector"
	"github.com/kvconnect/kvconnect/errdefs"
)

// Return codes of kvconnect.h (Mooncake's where one fits).
const (
	codeOK                = 0
	codeInvalidArgument   = -1
	codeTooManyRequests   = -2
	codeNotRegistered     = -3
	codeAddressOverlapped = -7
	codeDNS               = -101
	codeSocket            = -102
	codeRejectHandshake   = -104
	codeMetadata          = -200
	codeNotImplemented    = -303
	codeTimeout           = -1001
	codeClosed            = -1002
	codeNotInitialized    = -1003
	codeUnavailable       = -1004
	codeForked            = -1005
	codeNoCommonTransport = -1006
	codeUnknownBatch      = -1007
	codeInternal          = -1099
)

// codedError is an error with its return code.
type codedError struct {
	code int
	err  error
}

func (e *codedError) Error() string { return e.err.Error() }
func (e *codedError) Unwrap() error { return e.err }

func codeErr(code int, err error) error { return &codedError{code: code, err: err} }

// codeOf maps an error to its return code. The order matters: the most
// specific sentinel first.
func codeOf(err error) int {
	var ce *codedError
	if errors.As(err, &ce) {
		return ce.code
	}
	var chain *connector.ChainError
	var dns *net.DNSError
	switch {
	case err == nil:
		return codeOK
	case errors.As(err, &chain):
		return codeUnavailable
	case errors.As(err, &dns): // a host name (the node's, a peer's) did not resolve
		return codeDNS
	case errors.Is(err, errdefs.ErrAddressOverlap):
		return codeAddressOverlapped
	case errors.Is(err, errdefs.ErrUnknownRegion), errors.Is(err, errdefs.ErrOutOfBounds):
		return codeNotRegistered
	case errors.Is(err, errdefs.ErrUnknownPeer):
		return codeMetadata // a segment the metadata service does not have
	case errors.Is(err, errdefs.ErrInvalidArgument):
		return codeInvalidArgument
	case errors.Is(err, errdefs.ErrTimeout):
		return codeTimeout
	case errors.Is(err, errdefs.ErrClosed):
		return codeClosed
	case errors.Is(err, errdefs.ErrUnauthenticated):
		return codeRejectHandshake
	case errors.Is(err, errdefs.ErrNoCommonTransport):
		return codeNoCommonTransport
	case errors.Is(err, errdefs.ErrPeerUnreachable), errors.Is(err, errdefs.ErrTransportCrashed):
		return codeSocket
	case errors.Is(err, errdefs.ErrNotSupported):
		return codeNotImplemented
	case errors.Is(err, errdefs.ErrUnavailable):
		return codeUnavailable
	case errors.Is(err, errdefs.ErrResourceExhausted):
		return codeTooManyRequests
	case errors.Is(err, errdefs.ErrInternal):
		return codeInternal
	}
	return codeInvalidArgument
}

// errorJSON is the structured form of an error: its code, kind, message
// and, for a failed initialize, every transport attempt with its
// diagnosis.
func errorJSON(err error) string {
	out := struct {
		Code     int                 `json:"code"`
		Kind     string              `json:"kind,omitempty"`
		Kinds    []string            `json:"kinds,omitempty"`
		Message  string              `json:"message"`
		Strict   bool                `json:"strict,omitempty"`
		Attempts []connector.Attempt `json:"attempts,omitempty"`
	}{Code: codeOf(err), Kind: errdefs.Kind(err), Kinds: errdefs.Kinds(err), Message: err.Error()}
	var chain *connector.ChainError
	if errors.As(err, &chain) {
		out.Attempts, out.Strict = chain.Attempts, chain.Strict
	}
	b, jerr := json.Marshal(out)
	if jerr != nil {
		return `{"code":-1099,"kind":"internal"}`
	}
	return string(b)
}
