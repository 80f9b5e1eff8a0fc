package plugins

import (
	"errors"
	"fmt"
	"testing"
)

// TestInitErrorKeepsEverySentinelAcrossGRPC: a diagnosis wrapping two
// sentinels still matches both after the wire round trip.
func TestInitErrorKeepsEverySentinelAcrossGRPC(t *testing.T) {
	in := &InitError{Transport: "x", Step: StepInitPluginCrash, NativeName: "SIGSEGV", NativeCode: 11, Cause: "boom",
		Hints: []string{"h"}, Err: fmt.Errorf("%w: %w", ErrUnavailable, ErrTransportCrashed)}
	out := fromDetail(errorDetail(in))
	var ie *InitError
	if !errors.As(out, &ie) || ie.Cause != "boom" || ie.NativeCode != 11 || len(ie.Hints) != 1 {
		t.Fatalf("round trip lost fields: %+v", out)
	}
	for _, s := range []error{ErrUnavailable, ErrTransportCrashed} {
		if !errors.Is(out, s) {
			t.Errorf("after the round trip errors.Is(%v) is false", s)
		}
	}
	if errors.Is(out, ErrTimeout) {
		t.Error("the round trip added a sentinel")
	}
}

func TestInitErrorText(t *testing.T) {
	e := &InitError{Transport: "rdma", Step: StepProbeDevices, NativeName: "ENOSYS", NativeCode: 38, Cause: "no uverbs\nsecond line"}
	if got, want := e.Error(), "rdma: probe devices failed (ENOSYS 38): no uverbs\nsecond line"; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
	if got := (&InitError{Transport: "t", Step: StepBind, Cause: "c"}).Error(); got != "t: bind failed: c" {
		t.Fatalf("without a native code: %q", got)
	}
}

func TestErrorDetailKeepsEverySentinel(t *testing.T) {
	out := fromDetail(errorDetail(fmt.Errorf("lost: %w: %w", ErrPeerUnreachable, ErrTimeout)))
	if !errors.Is(out, ErrPeerUnreachable) || !errors.Is(out, ErrTimeout) || errors.Is(out, ErrClosed) {
		t.Fatalf("round trip: %v does not match exactly its two sentinels", out)
	}
	if out.Error() != "lost: peer unreachable: timed out" {
		t.Fatalf("message changed: %q", out.Error())
	}
}
