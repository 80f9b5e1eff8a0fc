package plugins

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kvconnect/kvconnect/plugins/proto"
)

// grpcCode is the gRPC status code used for an error kind.
func grpcCode(err error) codes.Code {
	switch {
	case errors.Is(err, ErrUnavailable):
		return codes.FailedPrecondition
	case errors.Is(err, ErrInvalidArgument):
		return codes.InvalidArgument
	case errors.Is(err, ErrOutOfBounds):
		return codes.OutOfRange
	case errors.Is(err, ErrUnknownRegion), errors.Is(err, ErrUnknownPeer):
		return codes.NotFound
	case errors.Is(err, ErrTimeout):
		return codes.DeadlineExceeded
	case errors.Is(err, ErrCanceled):
		return codes.Canceled
	case errors.Is(err, ErrNotSupported):
		return codes.Unimplemented
	case errors.Is(err, ErrClosed), errors.Is(err, ErrNotInitialized):
		return codes.FailedPrecondition
	case errors.Is(err, ErrPeerUnreachable):
		return codes.Unavailable
	}
	return codes.Unknown
}

// errorDetail encodes err for the wire.
func errorDetail(err error) *proto.ErrorDetail {
	if err == nil {
		return nil
	}
	d := &proto.ErrorDetail{Kind: ErrorKind(err), Message: err.Error(), Kinds: ErrorKinds(err)}
	var ie *InitError
	if errors.As(err, &ie) {
		d.Init = &proto.InitFailure{
			Transport: ie.Transport, Step: ie.Step, NativeCode: ie.NativeCode, NativeName: ie.NativeName,
			Cause: ie.Cause, Hints: ie.Hints, WrappedKind: ErrorKind(ie.Err), WrappedKinds: ErrorKinds(ie.Err),
		}
	}
	return d
}

// fromDetail rebuilds an error encoded by errorDetail.
func fromDetail(d *proto.ErrorDetail) error {
	if d == nil {
		return nil
	}
	if in := d.Init; in != nil {
		ie := &InitError{
			Transport: in.Transport, Step: in.Step, NativeCode: in.NativeCode, NativeName: in.NativeName,
			Cause: in.Cause, Hints: in.Hints,
		}
		ie.Err = sentinelChain(in.WrappedKinds)
		if ie.Err == nil {
			ie.Err = SentinelForKind(in.WrappedKind)
		}
		return ie
	}
	if len(d.Kinds) > 1 {
		return &remoteError{msg: d.Message, sentinel: sentinelChain(d.Kinds)}
	}
	return NewRemoteError(d.Kind, d.Message)
}

// toStatus turns an error returned by a transport into a gRPC status error
// that carries its kind and any InitError fields.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	st := status.New(grpcCode(err), err.Error())
	if withDetail, derr := st.WithDetails(errorDetail(err)); derr == nil {
		st = withDetail
	}
	return st.Err()
}

// fromStatus rebuilds the error behind a gRPC status. Statuses without our
// detail come from gRPC itself: the connection to the plugin broke, or the
// call's context ended.
func (c *grpcClient) fromStatus(ctx context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if ok {
		for _, d := range st.Details() {
			if ed, ok := d.(*proto.ErrorDetail); ok {
				return fromDetail(ed)
			}
		}
	}
	if ctx.Err() != nil {
		return fmt.Errorf("plugin %s: %s: %w", c.name, op, ContextError(ctx.Err()))
	}
	switch st.Code() {
	case codes.DeadlineExceeded:
		return fmt.Errorf("plugin %s: %s: %v: %w", c.name, op, err, ErrTimeout)
	case codes.ResourceExhausted:
		return fmt.Errorf("plugin %s: %s: %v: %w", c.name, op, err, ErrInvalidArgument)
	case codes.Unavailable, codes.Canceled:
		// The connection to the plugin broke or was closed: find out whether
		// the process is gone, and whether we closed it.
		if c.crashed != nil {
			if why, gone := c.crashed(); gone != nil {
				return fmt.Errorf("plugin %s: %s: %s: %w", c.name, op, why, gone)
			}
		}
		if st.Code() == codes.Canceled {
			return fmt.Errorf("plugin %s: %s: %v: %w", c.name, op, err, ErrCanceled)
		}
		return fmt.Errorf("plugin %s: %s: lost the connection to the plugin process: %v: %w", c.name, op, err, ErrTransportCrashed)
	}
	return fmt.Errorf("plugin %s: %s: %v: %w", c.name, op, err, ErrInternal)
}

// sentinelChain rebuilds an error wrapping every named sentinel.
func sentinelChain(kinds []string) error {
	var errs []error
	for _, k := range kinds {
		if s := SentinelForKind(k); s != nil {
			errs = append(errs, s)
		}
	}
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return errs[0]
	}
	return wrapAll(errs)
}

// wrapAll is an error that unwraps to each of errs and prints the first.
type wrapAll []error

func (w wrapAll) Error() string   { return w[0].Error() }
func (w wrapAll) Unwrap() []error { return w }
