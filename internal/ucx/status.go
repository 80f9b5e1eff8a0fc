// Package ucx is kvconnect's binding to UCX (libucp), shared by the ucx
// transport and the rdma transport (the same code restricted to RDMA
// lanes).
//
// The library is loaded with dlopen on first use (Load), never linked, so
// binaries that contain this package start on hosts without UCX and get a
// structured diagnosis (*LoadError, wrapping errdefs.ErrUnavailable) that
// names libucp.so.0 and the Debian package libucx0. Builds without cgo, or
// for other systems than Linux, compile a stub whose Load reports that.
//
// A Worker is one UCP context with one worker. Every Worker method except
// Wake must be called from the single goroutine that owns the worker (the
// transport's progress loop, locked to its OS thread); the worker is
// created in UCS_THREAD_MODE_SINGLE by default for that reason. Nothing in
// C calls back into Go: completions (by slot number), endpoint failures and
// received active messages are queued in C and drained by the owner after
// each Progress.
//
// UCX 1.13 has no structured query for the transports a context or an
// endpoint selected (ucp_ep_query's transports field came in 1.14), so
// Resources and Lanes parse ucp_context_print_info / ucp_ep_print_info.
// Those are for reporting and for checks such as "an RDMA lane was
// selected"; errors are never derived from text. Available lists what this
// host offers through UCT's structured resource queries.
package ucx

import (
	"fmt"

	"github.com/kvconnect/kvconnect/errdefs"
)

// Status is a UCX ucs_status_t.
type Status int32

// The ucs_status_t values kvconnect distinguishes (ucs/type/status.h; the
// numbers are UCX's stable ABI).
const (
	OK                  Status = 0
	InProgress          Status = 1
	ErrNoMessage        Status = -1
	ErrNoResource       Status = -2
	ErrIOError          Status = -3
	ErrNoMemory         Status = -4
	ErrInvalidParam     Status = -5
	ErrUnreachable      Status = -6
	ErrInvalidAddr      Status = -7
	ErrNotImplemented   Status = -8
	ErrMessageTruncated Status = -9
	ErrNoProgress       Status = -10
	ErrBufferTooSmall   Status = -11
	ErrNoElem           Status = -12
	ErrSomeConnectsFail Status = -13
	ErrNoDevice         Status = -14
	ErrBusy             Status = -15
	ErrCanceled         Status = -16
	ErrShmemSegment     Status = -17
	ErrAlreadyExists    Status = -18
	ErrOutOfRange       Status = -19
	ErrTimedOut         Status = -20
	ErrExceedsLimit     Status = -21
	ErrUnsupported      Status = -22
	ErrRejected         Status = -23
	ErrNotConnected     Status = -24
	ErrConnectionReset  Status = -25
	errFirstLinkFailure Status = -40
	errLastLinkFailure  Status = -59
	errFirstEPFailure   Status = -60
	ErrEndpointTimeout  Status = -80
	errLastEPFailure    Status = -89
)

var statusNames = map[Status]string{
	OK: "UCS_OK", InProgress: "UCS_INPROGRESS", ErrNoMessage: "UCS_ERR_NO_MESSAGE",
	ErrNoResource: "UCS_ERR_NO_RESOURCE", ErrIOError: "UCS_ERR_IO_ERROR", ErrNoMemory: "UCS_ERR_NO_MEMORY",
	ErrInvalidParam: "UCS_ERR_INVALID_PARAM", ErrUnreachable: "UCS_ERR_UNREACHABLE",
	ErrInvalidAddr: "UCS_ERR_INVALID_ADDR", ErrNotImplemented: "UCS_ERR_NOT_IMPLEMENTED",
	ErrMessageTruncated: "UCS_ERR_MESSAGE_TRUNCATED", ErrNoProgress: "UCS_ERR_NO_PROGRESS",
	ErrBufferTooSmall: "UCS_ERR_BUFFER_TOO_SMALL", ErrNoElem: "UCS_ERR_NO_ELEM",
	ErrSomeConnectsFail: "UCS_ERR_SOME_CONNECTS_FAILED", ErrNoDevice: "UCS_ERR_NO_DEVICE",
	ErrBusy: "UCS_ERR_BUSY", ErrCanceled: "UCS_ERR_CANCELED", ErrShmemSegment: "UCS_ERR_SHMEM_SEGMENT",
	ErrAlreadyExists: "UCS_ERR_ALREADY_EXISTS", ErrOutOfRange: "UCS_ERR_OUT_OF_RANGE",
	ErrTimedOut: "UCS_ERR_TIMED_OUT", ErrExceedsLimit: "UCS_ERR_EXCEEDS_LIMIT",
	ErrUnsupported: "UCS_ERR_UNSUPPORTED", ErrRejected: "UCS_ERR_REJECTED",
	ErrNotConnected: "UCS_ERR_NOT_CONNECTED", ErrConnectionReset: "UCS_ERR_CONNECTION_RESET",
	ErrEndpointTimeout: "UCS_ERR_ENDPOINT_TIMEOUT",
}

// Name is the status's symbolic name, e.g. "UCS_ERR_UNREACHABLE".
func (s Status) Name() string {
	if n, ok := statusNames[s]; ok {
		return n
	}
	switch {
	case s <= errFirstLinkFailure && s >= errLastLinkFailure:
		return fmt.Sprintf("UCS_ERR_LINK_FAILURE(%d)", int32(s))
	case s <= errFirstEPFailure && s >= errLastEPFailure:
		return fmt.Sprintf("UCS_ERR_ENDPOINT_FAILURE(%d)", int32(s))
	}
	return fmt.Sprintf("ucs_status_t(%d)", int32(s))
}

// Sentinel maps a status to the SDK sentinel a data-path failure with it
// wraps. OK and InProgress map to nil.
func (s Status) Sentinel() error {
	switch {
	case s == OK || s == InProgress:
		return nil
	case s == ErrCanceled:
		return errdefs.ErrCanceled
	case s == ErrTimedOut:
		return errdefs.ErrTimeout
	case s == ErrUnreachable, s == ErrConnectionReset, s == ErrNotConnected, s == ErrIOError,
		s == ErrRejected, s == ErrShmemSegment, s == ErrSomeConnectsFail,
		s <= errFirstLinkFailure && s >= errLastEPFailure:
		return errdefs.ErrPeerUnreachable
	case s == ErrInvalidParam, s == ErrInvalidAddr, s == ErrOutOfRange, s == ErrMessageTruncated,
		s == ErrBufferTooSmall:
		return errdefs.ErrInvalidArgument
	case s == ErrUnsupported, s == ErrNotImplemented:
		return errdefs.ErrNotSupported
	case s == ErrNoDevice:
		return errdefs.ErrUnavailable
	}
	return errdefs.ErrInternal
}

// StatusError is a failed UCX call: what was being done, the native
// status (its name and number are in the text) and the sentinel it maps to.
type StatusError struct {
	Op     string // e.g. "ucp_put_nbx"
	Status Status
	Text   string // ucs_status_string, when the library is loaded
}

func (e *StatusError) Error() string {
	text := e.Text
	if text == "" {
		text = "failed"
	}
	return fmt.Sprintf("%s: %s (%s %d)", e.Op, text, e.Status.Name(), int32(e.Status))
}

// Unwrap returns the SDK sentinel for the status.
func (e *StatusError) Unwrap() error { return e.Status.Sentinel() }

// Error returns a *StatusError for a failed call, or nil when s is OK.
func (s Status) Error(op string) error {
	if s == OK || s == InProgress {
		return nil
	}
	return &StatusError{Op: op, Status: s, Text: statusText(s)}
}

// ThreadMode is the UCX thread mode of a worker.
type ThreadMode int

// Thread modes, numbered as ucs_thread_mode_t.
const (
	ThreadSingle     ThreadMode = 0
	ThreadSerialized ThreadMode = 1
	ThreadMulti      ThreadMode = 2
)

// ParseThreadMode accepts "single", "serialized" and "multi".
func ParseThreadMode(s string) (ThreadMode, bool) {
	switch s {
	case "single":
		return ThreadSingle, true
	case "serialized":
		return ThreadSerialized, true
	case "multi":
		return ThreadMulti, true
	}
	return 0, false
}

func (m ThreadMode) String() string {
	switch m {
	case ThreadSingle:
		return "single"
	case ThreadSerialized:
		return "serialized"
	case ThreadMulti:
		return "multi"
	}
	return fmt.Sprintf("ThreadMode(%d)", int(m))
}
