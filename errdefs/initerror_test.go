package errdefs

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

func TestInitErrorText(t *testing.T) {
	e := &InitError{Transport: "rdma", Step: StepProbeDevices, NativeName: "ENOSYS", NativeCode: 38, Cause: "no uverbs\nsecond line"}
	if got, want := e.Error(), "rdma: probe devices failed (ENOSYS 38): no uverbs\nsecond line"; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
	if got := (&InitError{Transport: "t", Step: StepBind, Cause: "c"}).Error(); got != "t: bind failed: c" {
		t.Fatalf("without a native code: %q", got)
	}
	if !errors.Is(&InitError{Err: ErrUnavailable}, ErrUnavailable) {
		t.Fatal("InitError does not unwrap to its sentinel")
	}
}

func TestKindsRoundTrip(t *testing.T) {
	seen := map[string]bool{}
	for _, name := range KindNames() {
		if seen[name] {
			t.Fatalf("kind %q appears twice", name)
		}
		seen[name] = true
		s := FromKind(name)
		if s == nil {
			t.Fatalf("kind %q names no sentinel", name)
		}
		wrapped := fmt.Errorf("op: %w", s)
		if Kind(wrapped) != name {
			t.Errorf("Kind(%v) = %q, want %q", wrapped, Kind(wrapped), name)
		}
	}
	if FromKind("no-such-kind") != nil || Kind(errors.New("plain")) != "" || Kind(nil) != "" {
		t.Fatal("unknown kinds or plain errors map to a sentinel")
	}
	two := fmt.Errorf("%w: %w", ErrPeerUnreachable, ErrTimeout)
	if got := Kinds(two); len(got) != 2 || got[0] != "peer_unreachable" || got[1] != "timeout" {
		t.Fatalf("Kinds = %v", got)
	}
	back := Remote("lost", Kinds(two)...)
	if back.Error() != "lost" || !errors.Is(back, ErrPeerUnreachable) || !errors.Is(back, ErrTimeout) || errors.Is(back, ErrClosed) {
		t.Fatalf("Remote: %v", back)
	}
	if Remote("") != nil || Join() != nil {
		t.Fatal("empty Remote/Join is not nil")
	}
}

func TestFromContext(t *testing.T) {
	if err := FromContext(context.DeadlineExceeded); !errors.Is(err, ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("deadline: %v", err)
	}
	if err := FromContext(context.Canceled); !errors.Is(err, ErrCanceled) || !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled: %v", err)
	}
	other := errors.New("other")
	if FromContext(other) != other || FromContext(nil) != nil {
		t.Fatal("other errors change")
	}
}
