package pluginrpc

import (
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kvconnect/kvconnect/errdefs"
	"github.com/kvconnect/kvconnect/internal/pluginrpc/proto"
)

// Code is the gRPC status code used for an error.
func Code(err error) codes.Code {
	switch {
	case errors.Is(err, errdefs.ErrUnavailable):
		return codes.FailedPrecondition
	case errors.Is(err, errdefs.ErrInvalidArgument):
		return codes.InvalidArgument
	case errors.Is(err, errdefs.ErrOutOfBounds):
		return codes.OutOfRange
	case errors.Is(err, errdefs.ErrUnknownRegion), errors.Is(err, errdefs.ErrUnknownPeer):
		return codes.NotFound
	case errors.Is(err, errdefs.ErrTimeout):
		return codes.DeadlineExceeded
	case errors.Is(err, errdefs.ErrCanceled):
		return codes.Canceled
	case errors.Is(err, errdefs.ErrNotSupported):
		return codes.Unimplemented
	case errors.Is(err, errdefs.ErrUnauthenticated):
		return codes.Unauthenticated
	case errors.Is(err, errdefs.ErrClosed), errors.Is(err, errdefs.ErrNotInitialized):
		return codes.FailedPrecondition
	case errors.Is(err, errdefs.ErrPeerUnreachable):
		return codes.Unavailable
	case errors.Is(err, errdefs.ErrResourceExhausted):
		return codes.ResourceExhausted
	}
	return codes.Unknown
}

// Detail encodes err for the wire: its message, every sentinel it wraps
// and, for an *errdefs.InitError, the diagnosis' fields.
func Detail(err error) *proto.ErrorDetail {
	if err == nil {
		return nil
	}
	d := &proto.ErrorDetail{Kind: errdefs.Kind(err), Message: err.Error(), Kinds: errdefs.Kinds(err)}
	var ie *errdefs.InitError
	if errors.As(err, &ie) {
		d.Init = &proto.InitFailure{
			Transport: ie.Transport, Step: ie.Step, NativeCode: ie.NativeCode, NativeName: ie.NativeName,
			Cause: ie.Cause, Hints: ie.Hints, WrappedKind: errdefs.Kind(ie.Err), WrappedKinds: errdefs.Kinds(ie.Err),
		}
	}
	return d
}

// FromDetail rebuilds an error encoded by Detail: it prints the same
// message and errors.Is matches the same sentinels; a diagnosis comes back
// as an *errdefs.InitError.
func FromDetail(d *proto.ErrorDetail) error {
	if d == nil {
		return nil
	}
	if in := d.Init; in != nil {
		ie := &errdefs.InitError{
			Transport: in.Transport, Step: in.Step, NativeCode: in.NativeCode, NativeName: in.NativeName,
			Cause: in.Cause, Hints: in.Hints,
		}
		kinds := in.WrappedKinds
		if len(kinds) == 0 && in.WrappedKind != "" {
			kinds = []string{in.WrappedKind}
		}
		ie.Err = errdefs.Join(kinds...)
		if d.Message == ie.Error() {
			return ie
		}
		// The diagnosis came wrapped (fmt.Errorf("...: %w", ie), or with
		// more sentinels beside it): keep the whole message and every
		// sentinel the wrapping added, and the diagnosis for errors.As.
		return &wrappedInit{msg: d.Message, ie: ie, outer: errdefs.Remote(d.Message, d.Kinds...)}
	}
	kinds := d.Kinds
	if len(kinds) == 0 && d.Kind != "" {
		kinds = []string{d.Kind}
	}
	return errdefs.Remote(d.Message, kinds...)
}

// wrappedInit is an *errdefs.InitError that crossed the wire inside
// another error: it prints the outer message and matches the sentinels of
// both.
type wrappedInit struct {
	msg   string
	ie    *errdefs.InitError
	outer error
}

func (e *wrappedInit) Error() string   { return e.msg }
func (e *wrappedInit) Unwrap() []error { return []error{e.ie, e.outer} }

// ToStatus turns an error returned by a transport into a gRPC status error
// that carries its Detail.
func ToStatus(err error) error {
	if err == nil {
		return nil
	}
	st := status.New(Code(err), err.Error())
	if withDetail, derr := st.WithDetails(Detail(err)); derr == nil {
		st = withDetail
	}
	return st.Err()
}

// FromStatus rebuilds the error behind a gRPC status made by ToStatus. ok
// is false when the status carries no Detail: it came from gRPC itself
// (the connection broke, the call's context ended), and the caller
// decides what it means.
func FromStatus(err error) (rebuilt error, ok bool) {
	st, isStatus := status.FromError(err)
	if !isStatus {
		return nil, false
	}
	for _, d := range st.Details() {
		if ed, isDetail := d.(*proto.ErrorDetail); isDetail {
			return FromDetail(ed), true
		}
	}
	return nil, false
}
