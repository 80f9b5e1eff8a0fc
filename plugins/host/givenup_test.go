//go:build linux

package host

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvconnect/kvconnect/errdefs"
	"github.com/kvconnect/kvconnect/internal/pluginrpc"
	"github.com/kvconnect/kvconnect/internal/testbin"
	"github.com/kvconnect/kvconnect/plugins"
)

// lingeringTransport is a memTransport whose Transfer, once its context
// ended, reports that on ended and returns only when let is closed (a
// transport taking back what it sent: tcp resetting its connections).
// Its first op then completes and its second fails.
type lingeringTransport struct {
	memTransport
	running  atomic.Int32
	ended    chan struct{}
	let      chan struct{}
	returned atomic.Bool
}

func (l *lingeringTransport) Transfer(ctx context.Context, _ plugins.PeerID, _ []plugins.Op, res []plugins.OpResult) error {
	l.running.Add(1)
	<-ctx.Done()
	l.ended <- struct{}{}
	<-l.let
	plugins.FillResults(res, nil)
	err := fmt.Errorf("lingering: %w", plugins.ContextError(ctx.Err()))
	res[1].Err = err
	l.returned.Store(true)
	return err
}

// inMemoryOver is an in-memory plugin whose batches go through path:
// "ring", or "grpc" (Transfer calls: rings off).
func inMemoryOver(t *testing.T, path string, tr plugins.Transport) *inMemory {
	t.Helper()
	if path == "ring" {
		return inMemoryRing(t, tr)
	}
	t.Setenv(pluginrpc.EnvRings, "0")
	m := inMemoryInit(t, tr)
	if m.ring.Load() != nil {
		t.Fatal("a ring although rings are off")
	}
	return m
}

var paths = []string{"ring", "grpc"}

// TestTransferWaitsForTheGivenUpBatch: a batch whose context ends
// returns only once the plugin's Transfer returned (so that what the
// transport does on giving up, such as resetting a connection a WRITE is
// on, is done when the caller hears the WRITE failed), with the caller's
// context error on the ops that failed and the completed op kept. Through
// the ring and through Transfer calls.
func TestTransferWaitsForTheGivenUpBatch(t *testing.T) {
	for _, path := range paths {
		t.Run(path, func(t *testing.T) { transferWaitsForTheGivenUpBatch(t, path) })
	}
}

func transferWaitsForTheGivenUpBatch(t *testing.T, path string) {
	for _, tc := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		want error
	}{
		{"cancel", func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) }, errdefs.ErrCanceled},
		{"deadline", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 100*time.Millisecond)
		}, errdefs.ErrTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lt := &lingeringTransport{ended: make(chan struct{}, 1), let: make(chan struct{})}
			m := inMemoryOver(t, path, lt)
			ctx, cancel := tc.ctx()
			defer cancel()
			res := make([]plugins.OpResult, 2)
			done := make(chan error, 1)
			go func() { done <- m.Transfer(ctx, 7, ops(2), res) }()
			for lt.running.Load() == 0 {
				runtime.Gosched()
			}
			if tc.name == "cancel" {
				cancel()
			}
			<-lt.ended
			// The plugin holds the batch: the host must not return. A host
			// that returns at its context's end does so at once; give it a
			// moment to show (no duration is asserted).
			select {
			case err := <-done:
				t.Fatalf("Transfer returned (%v) while the plugin still held the batch", err)
			case <-time.After(100 * time.Millisecond):
			}
			close(lt.let)
			var err error
			select {
			case err = <-done:
			case <-time.After(testbin.WaitLimit):
				t.Fatal("Transfer still running after the plugin returned")
			}
			if !lt.returned.Load() {
				t.Fatal("Transfer returned before the plugin's Transfer")
			}
			if !errors.Is(err, tc.want) || res[0].Err != nil || !errors.Is(res[1].Err, tc.want) {
				t.Errorf("%v / %v / %v, want %v, the first op done", err, res[0].Err, res[1].Err, tc.want)
			}
		})
	}
}

// TestGivenUpBatchOfAPluginThatDoesNotReport: a plugin that does not
// report a batch whose context ended (wedged) holds its caller at most
// givenUpWait; through the ring, the batch's area comes back when the
// plugin reports it after all.
func TestGivenUpBatchOfAPluginThatDoesNotReport(t *testing.T) {
	for _, path := range paths {
		t.Run(path, func(t *testing.T) { givenUpBatchOfAPluginThatDoesNotReport(t, path) })
	}
}

func givenUpBatchOfAPluginThatDoesNotReport(t *testing.T, path string) {
	defer func(old time.Duration) { givenUpWait = old }(givenUpWait)
	givenUpWait = 50 * time.Millisecond
	lt := &lingeringTransport{ended: make(chan struct{}, 1), let: make(chan struct{})}
	m := inMemoryOver(t, path, lt)
	ctx, cancel := context.WithCancel(context.Background())
	res := make([]plugins.OpResult, 2)
	done := make(chan error, 1)
	go func() { done <- m.Transfer(ctx, 7, ops(2), res) }()
	for lt.running.Load() == 0 {
		runtime.Gosched()
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, errdefs.ErrCanceled) || !errors.Is(res[0].Err, errdefs.ErrCanceled) {
			t.Fatalf("%v / %v, want ErrCanceled on every op", err, res[0].Err)
		}
	case <-time.After(testbin.WaitLimit):
		t.Fatal("Transfer held past givenUpWait by a plugin that does not report")
	}
	if lt.returned.Load() {
		t.Fatal("the plugin returned: the test shows nothing")
	}
	close(lt.let)
	if path != "ring" {
		return
	}
	testbin.Eventually(t, "the given-up batch to be reaped", func() bool {
		rc := m.ring.Load()
		rc.mu.Lock()
		defer rc.mu.Unlock()
		return len(rc.pending) == 0 && !rc.reaping
	})
}

// TestBatchGivenUpAsItIsSent: a caller that gives up right as its batch
// is sent over gRPC (its CancelTransfer travels on another stream than
// the Transfer call, and can reach the plugin first) still has its batch
// canceled in the plugin, and gets the answer well before givenUpWait
// (here 10 minutes).
func TestBatchGivenUpAsItIsSent(t *testing.T) {
	defer func(old time.Duration) { givenUpWait = old }(givenUpWait)
	givenUpWait = 10 * time.Minute
	lt := &lingeringTransport{ended: make(chan struct{}, 64), let: make(chan struct{})}
	close(lt.let)
	m := inMemoryOver(t, "grpc", lt)
	var cancel context.CancelFunc
	testBeforeTransferCall = func(uint64) { cancel() }
	defer func() { testBeforeTransferCall = nil }()
	for i := range 50 {
		ctx, c := context.WithCancel(context.Background())
		defer c()
		cancel = c
		res := make([]plugins.OpResult, 2)
		done := make(chan error, 1)
		go func() { done <- m.Transfer(ctx, 7, ops(2), res) }()
		select {
		case err := <-done:
			if !errors.Is(err, errdefs.ErrCanceled) || !errors.Is(res[1].Err, errdefs.ErrCanceled) {
				t.Fatalf("batch %d: %v / %v, want ErrCanceled", i, err, res[1].Err)
			}
		case <-time.After(testbin.WaitLimit):
			t.Fatalf("batch %d: the cancellation never reached the plugin", i)
		}
		select {
		case <-lt.ended:
		case <-time.After(testbin.WaitLimit):
			t.Fatalf("batch %d: the plugin never ran it", i)
		}
	}
}

// TestBatchOfAnEndedContextIsNotSent: a batch whose context ended before
// Transfer is failed with the context's error and never reaches the
// plugin (over gRPC the call would outlive the context).
func TestBatchOfAnEndedContextIsNotSent(t *testing.T) {
	for _, path := range paths {
		t.Run(path, func(t *testing.T) {
			lt := &lingeringTransport{ended: make(chan struct{}, 1), let: make(chan struct{})}
			close(lt.let)
			m := inMemoryOver(t, path, lt)
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			res := make([]plugins.OpResult, 2)
			if err := m.Transfer(ctx, 7, ops(2), res); !errors.Is(err, errdefs.ErrCanceled) || !errors.Is(res[1].Err, errdefs.ErrCanceled) {
				t.Fatalf("%v / %v, want ErrCanceled", err, res[1].Err)
			}
			if lt.running.Load() != 0 {
				t.Fatal("the plugin ran a batch whose context had ended")
			}
		})
	}
}

// TestRingStoppingWhileAGivenUpBatchWaits: the plugin's ring stops (its
// Close) while a batch whose context ended waits for the plugin's
// report: the caller's context is still the reason given, as over gRPC.
func TestRingStoppingWhileAGivenUpBatchWaits(t *testing.T) {
	lt := &lingeringTransport{ended: make(chan struct{}, 1), let: make(chan struct{})}
	defer close(lt.let)
	m := inMemoryOver(t, "ring", lt)
	ctx, cancel := context.WithCancel(context.Background())
	res := make([]plugins.OpResult, 2)
	done := make(chan error, 1)
	go func() { done <- m.Transfer(ctx, 7, ops(2), res) }()
	for lt.running.Load() == 0 {
		runtime.Gosched()
	}
	cancel()
	<-lt.ended
	m.closeRing()
	select {
	case err := <-done:
		if !errors.Is(err, errdefs.ErrCanceled) || !errors.Is(res[0].Err, errdefs.ErrCanceled) {
			t.Fatalf("%v / %v, want ErrCanceled on every op", err, res[0].Err)
		}
	case <-time.After(testbin.WaitLimit):
		t.Fatal("Transfer still waiting after the ring stopped")
	}
}
