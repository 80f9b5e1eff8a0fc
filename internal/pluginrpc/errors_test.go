package pluginrpc

import (
	"errors"
	"fmt"
	"reflect"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kvconnect/kvconnect/errdefs"
)

// TestErrorMappingRoundTrip: every sentinel a transport returns comes back
// with errors.Is working and its message intact.
func TestErrorMappingRoundTrip(t *testing.T) {
	for _, name := range errdefs.KindNames() {
		sentinel := errdefs.FromKind(name)
		err := fmt.Errorf("x: some op: %w", sentinel)
		st := ToStatus(err)
		if got, want := status.Code(st), Code(err); got != want {
			t.Errorf("%s: code %v, want %v", name, got, want)
		}
		back, ok := FromStatus(st)
		if !ok || !errors.Is(back, sentinel) || back.Error() != err.Error() || errdefs.Kind(back) != name {
			t.Errorf("%s: came back as %v (kind %q, ok %v)", name, back, errdefs.Kind(back), ok)
		}
	}
	if ToStatus(nil) != nil {
		t.Error("nil does not map to nil")
	}
	plain := errors.New("no sentinel here")
	if back, ok := FromStatus(ToStatus(plain)); !ok || back.Error() != plain.Error() || errdefs.Kind(back) != "" {
		t.Errorf("plain error came back as %v (kind %q)", back, errdefs.Kind(back))
	}
	if _, ok := FromStatus(status.Error(codes.Unavailable, "from grpc")); ok {
		t.Error("a status made by gRPC itself claims to carry a detail")
	}
}

func TestInitErrorCrossesGRPC(t *testing.T) {
	ie := &errdefs.InitError{
		Transport: "rdma", Step: errdefs.StepOpenDevice, NativeCode: 19, NativeName: "ENODEV",
		Cause: "mlx5_0 port 1 is DOWN", Hints: []string{"check the cable", "ibv_devinfo"},
		Err: fmt.Errorf("rdma: %w", errdefs.ErrUnavailable),
	}
	back, _ := FromStatus(ToStatus(fmt.Errorf("wrapped: %w", ie)))
	var got *errdefs.InitError
	if !errors.As(back, &got) {
		t.Fatalf("came back as %T %v", back, back)
	}
	if !errors.Is(back, errdefs.ErrUnavailable) {
		t.Error("errors.Is(ErrUnavailable) lost")
	}
	want := *ie
	want.Err = errdefs.ErrUnavailable
	if !reflect.DeepEqual(*got, want) {
		t.Errorf("got %#v\nwant %#v", *got, want)
	}
}

// TestInitErrorKeepsEverySentinel: a diagnosis wrapping two sentinels
// still matches both after the wire round trip, and nothing more.
func TestInitErrorKeepsEverySentinel(t *testing.T) {
	in := &errdefs.InitError{Transport: "x", Step: errdefs.StepInitPluginCrash, NativeName: "SIGSEGV", NativeCode: 11, Cause: "boom",
		Hints: []string{"h"}, Err: fmt.Errorf("%w: %w", errdefs.ErrUnavailable, errdefs.ErrTransportCrashed)}
	out := FromDetail(Detail(in))
	var ie *errdefs.InitError
	if !errors.As(out, &ie) || ie.Cause != "boom" || ie.NativeCode != 11 || len(ie.Hints) != 1 {
		t.Fatalf("round trip lost fields: %+v", out)
	}
	for _, s := range []error{errdefs.ErrUnavailable, errdefs.ErrTransportCrashed} {
		if !errors.Is(out, s) {
			t.Errorf("after the round trip errors.Is(%v) is false", s)
		}
	}
	if errors.Is(out, errdefs.ErrTimeout) {
		t.Error("the round trip added a sentinel")
	}
}

func TestErrorDetailKeepsEverySentinel(t *testing.T) {
	out := FromDetail(Detail(fmt.Errorf("lost: %w: %w", errdefs.ErrPeerUnreachable, errdefs.ErrTimeout)))
	if !errors.Is(out, errdefs.ErrPeerUnreachable) || !errors.Is(out, errdefs.ErrTimeout) || errors.Is(out, errdefs.ErrClosed) {
		t.Fatalf("round trip: %v does not match exactly its two sentinels", out)
	}
	if out.Error() != "lost: peer unreachable: timed out" {
		t.Fatalf("message changed: %q", out.Error())
	}
}

// TestWrappedInitErrorKeepsTheWrapping: a diagnosis returned inside
// another error (more sentinels, more text) comes back with the outer
// message and sentinels, and still as an *errdefs.InitError.
func TestWrappedInitErrorKeepsTheWrapping(t *testing.T) {
	ie := &errdefs.InitError{Transport: "x", Step: errdefs.StepProbeDevices, Cause: "slow probe",
		Err: fmt.Errorf("x: %w", errdefs.ErrUnavailable)}
	err := fmt.Errorf("init gave up: %w: %w", errdefs.ErrTimeout, ie)
	back, _ := FromStatus(ToStatus(err))
	var got *errdefs.InitError
	if !errors.As(back, &got) || got.Cause != "slow probe" {
		t.Fatalf("came back as %T %v, want an InitError inside", back, back)
	}
	for _, s := range []error{errdefs.ErrTimeout, errdefs.ErrUnavailable} {
		if !errors.Is(back, s) {
			t.Errorf("errors.Is(%v) lost", s)
		}
	}
	if back.Error() != err.Error() {
		t.Errorf("message %q, want %q", back.Error(), err.Error())
	}
}
