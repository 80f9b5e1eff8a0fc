package plugins

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestErrorMappingRoundTrip: every sentinel a transport returns reaches
// the host with errors.Is working and its message intact.
func TestErrorMappingRoundTrip(t *testing.T) {
	c := &grpcClient{name: "x"}
	for _, k := range kinds {
		err := fmt.Errorf("x: some op: %w", k.err)
		st := toStatus(err)
		if got, want := status.Code(st), grpcCode(err); got != want {
			t.Errorf("%s: code %v, want %v", k.name, got, want)
		}
		back := c.fromStatus(context.Background(), "op", st)
		if !errors.Is(back, k.err) || back.Error() != err.Error() || ErrorKind(back) != k.name {
			t.Errorf("%s: came back as %v (kind %q)", k.name, back, ErrorKind(back))
		}
	}
	if toStatus(nil) != nil || c.fromStatus(context.Background(), "op", nil) != nil {
		t.Error("nil does not map to nil")
	}
	plain := errors.New("no sentinel here")
	if back := c.fromStatus(context.Background(), "op", toStatus(plain)); back.Error() != plain.Error() || ErrorKind(back) != "" {
		t.Errorf("plain error came back as %v (kind %q)", back, ErrorKind(back))
	}
}

func TestInitErrorCrossesGRPC(t *testing.T) {
	ie := &InitError{
		Transport: "rdma", Step: StepOpenDevice, NativeCode: 19, NativeName: "ENODEV",
		Cause: "mlx5_0 port 1 is DOWN", Hints: []string{"check the cable", "ibv_devinfo"},
		Err: fmt.Errorf("rdma: %w", ErrUnavailable),
	}
	back := (&grpcClient{name: "rdma"}).fromStatus(context.Background(), "init", toStatus(fmt.Errorf("wrapped: %w", ie)))
	var got *InitError
	if !errors.As(back, &got) {
		t.Fatalf("came back as %T %v", back, back)
	}
	if !errors.Is(back, ErrUnavailable) {
		t.Error("errors.Is(ErrUnavailable) lost")
	}
	want := *ie
	want.Err = ErrUnavailable
	if !reflect.DeepEqual(*got, want) {
		t.Errorf("got %#v\nwant %#v", *got, want)
	}
}

// TestStatusWithoutDetail: statuses made by gRPC itself map to sentinels.
func TestStatusWithoutDetail(t *testing.T) {
	crashed := &grpcClient{name: "x", crashed: func() (string, error) { return "the plugin process exited", ErrTransportCrashed }}
	running := &grpcClient{name: "x", crashed: func() (string, error) { return "", nil }}
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		c    *grpcClient
		ctx  context.Context
		code codes.Code
		want error
	}{
		{running, context.Background(), codes.DeadlineExceeded, ErrTimeout},
		{running, context.Background(), codes.ResourceExhausted, ErrInvalidArgument},
		{running, context.Background(), codes.Unavailable, ErrTransportCrashed},
		{running, context.Background(), codes.Canceled, ErrCanceled},
		{crashed, context.Background(), codes.Unavailable, ErrTransportCrashed},
		{running, canceled, codes.Unavailable, ErrCanceled},
		{running, context.Background(), codes.Internal, ErrInternal},
	} {
		err := tc.c.fromStatus(tc.ctx, "op", status.Error(tc.code, "from grpc"))
		if !errors.Is(err, tc.want) {
			t.Errorf("%v: %v, want %v", tc.code, err, tc.want)
		}
	}
}

// TestErrorsFromARealPlugin: errors a transport returns in a plugin
// process reach the host with errors.Is and *InitError intact.
func TestErrorsFromARealPlugin(t *testing.T) {
	isolate(t)
	p := launchFake(t, "FAKEPLUGIN_INIT=fail")
	for _, k := range kinds {
		_, err := p.Connect(t.Context(), PeerInfo{Name: k.name})
		if !errors.Is(err, k.err) {
			t.Errorf("%s: %v does not match its sentinel", k.name, err)
		}
		if want := fmt.Sprintf("fake: connect %s: %v", k.name, k.err); err == nil || err.Error() != want {
			t.Errorf("%s: message %v, want %q", k.name, err, want)
		}
	}
	_, err := p.Init(t.Context(), InitRequest{})
	var ie *InitError
	if !errors.As(err, &ie) {
		t.Fatalf("Init: %T %v, want *InitError", err, err)
	}
	want := InitError{Transport: "fake", Step: StepProbeDevices, NativeCode: 19, NativeName: "ENODEV",
		Cause: "no RDMA device is present", Hints: []string{"install an RDMA NIC", "or use tcp"}, Err: ErrUnavailable}
	if !reflect.DeepEqual(*ie, want) || !errors.Is(err, ErrUnavailable) {
		t.Errorf("got %#v\nwant %#v", *ie, want)
	}
}
