package plugins

import (
	"context"
	"errors"
	"testing"

	"github.com/kvconnect/kvconnect/errdefs"
)

// TestTransferCalls: a batch's context ends by CancelTransfer naming its
// id, or at the caller's timeout; an id already running is refused; a
// cancel for an id not running finds nothing.
func TestTransferCalls(t *testing.T) {
	var tc transferCalls
	if tc.cancel(1) {
		t.Fatal("cancel of an id never started found it")
	}
	ctx, end, err := tc.start(context.Background(), 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := tc.start(context.Background(), 1, 0); !errors.Is(err, errdefs.ErrProtocol) {
		t.Fatalf("a second batch with id 1: %v, want ErrProtocol", err)
	}
	if ctx.Err() != nil {
		t.Fatal("the batch's context ended by itself")
	}
	if !tc.cancel(1) || !errors.Is(ctx.Err(), context.Canceled) {
		t.Fatalf("cancel of a running batch: context %v", ctx.Err())
	}
	end()
	if tc.cancel(1) {
		t.Fatal("cancel after the batch ended found it")
	}
	ctx, end, err = tc.start(context.Background(), 2, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer end()
	<-ctx.Done()
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatalf("a batch with a timeout ended with %v", ctx.Err())
	}
	ctx, end, err = tc.start(context.Background(), 0, 0)
	if err != nil || ctx.Err() != nil {
		t.Fatalf("a batch without id: %v %v", err, ctx.Err())
	}
	end()
	if ctx.Err() == nil {
		t.Fatal("end left the context running")
	}
}
