//go:build linux

package tcp

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvconnect/kvconnect/internal/spin"
	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/plugins/transporttest"
)

// TestReadSpin: a spinning read returns input that is there (caught),
// and one that finds none within its spin waits in the poller (slept),
// where its deadline ends it; a spin whose budget outlasts the deadline
// is ended by its stop flag, which is how a caller giving up reaches it.
func TestReadSpin(t *testing.T) {
	a, b := tcpPair(t)
	v := newRawIO(a)
	if v == nil {
		t.Fatal("no raw I/O for a TCP connection")
	}
	buf := make([]byte, 64)

	if _, err := b.Write([]byte("answer")); err != nil {
		t.Fatal(err)
	}
	n, slept, err := v.readSpin(buf, spin.Until(time.Now().Add(time.Second), nil), new(atomic.Bool))
	if err != nil || string(buf[:n]) != "answer" || slept {
		t.Fatalf("input waiting: read %q, slept %v, %v", buf[:n], slept, err)
	}

	a.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	_, slept, err = v.readSpin(buf, spin.Until(time.Now().Add(time.Microsecond), nil), new(atomic.Bool))
	if !errors.Is(err, os.ErrDeadlineExceeded) || !slept {
		t.Fatalf("no input: slept %v, %v; want a sleep ended by the deadline", slept, err)
	}

	// A budget of an hour, stopped: the read is the poller's at once.
	// Without the stop the spin could only end by being descheduled,
	// which its Adapt would hear of.
	stop := new(atomic.Bool)
	stop.Store(true)
	ad := &spin.Adapt{Max: time.Hour}
	a.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	done := make(chan error, 1)
	go func() {
		_, _, err := v.readSpin(buf, spin.Until(time.Now().Add(time.Hour), ad), stop)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("stopped spin: %v, want the deadline", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("a stopped spin went on past its read deadline")
	}
	if st := ad.Stats(); st.Tries != 1 || st.Preempted != 0 {
		t.Fatalf("the stopped spin told its Adapt of %d tries, %d descheduled; want 1 try, ended by the stop", st.Tries, st.Preempted)
	}
}

// TestSpinEnd: a lone op spins for its budget, but never past its
// context's deadline.
func TestSpinEnd(t *testing.T) {
	start := time.Now()
	soon, cancel := context.WithDeadline(context.Background(), start.Add(time.Millisecond))
	defer cancel()
	late, cancel2 := context.WithDeadline(context.Background(), start.Add(time.Hour))
	defer cancel2()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		want time.Time
	}{
		{"no deadline", context.Background(), start.Add(time.Minute)},
		{"deadline first", soon, start.Add(time.Millisecond)},
		{"budget first", late, start.Add(time.Minute)},
	} {
		if got := spinEnd(tc.ctx, start, time.Minute); !got.Equal(tc.want) {
			t.Errorf("%s: spin ends %v after start, want %v", tc.name, got.Sub(start), tc.want.Sub(start))
		}
	}
}

// TestLoneOpsSpin: a lone small op's response is read by a spinning read
// (caught or after a sleep: either way it spun), and with the knob at 0
// none spins. Batches never do, nor lone ops whose completion is polled
// (the transport as a plugin, its batch from a ring).
func TestLoneOpsSpin(t *testing.T) {
	for _, tc := range []struct {
		knob      string
		batch     int
		polled    bool // the batch's completion is polled (a ring's batch)
		wantSpins bool
	}{
		{"", 1, false, true},
		{"0", 1, false, false},
		{"", 8, false, false},
		{"", 1, true, false},
	} {
		t.Run(fmt.Sprintf("knob=%q/batch=%d/polled=%v", tc.knob, tc.batch, tc.polled), func(t *testing.T) {
			t.Setenv(EnvLoneSpin, tc.knob)
			h := transporttest.Harness{New: func(*testing.T) plugins.Transport { return New() }, Options: []byte(`{"connections":1}`)}
			a, b := transporttest.NewNode(t, h, "a"), transporttest.NewNode(t, h, "b")
			src, dst := a.Alloc(t, 1<<20, 0), b.Alloc(t, 1<<20, 0)
			peer := a.Connect(t, b)
			ops := make([]plugins.Op, tc.batch)
			for i := range ops {
				ops[i] = plugins.Op{Kind: plugins.OpWrite, LocalRegion: src.ID, RemoteRegion: dst.ID, RemoteOffset: uint64(i) * 4096, Length: 4096}
			}
			const rounds = 20
			ctx := context.Background()
			if tc.polled {
				ctx = plugins.WithCompletionPolled(ctx)
			}
			res := make([]plugins.OpResult, len(ops))
			for range rounds {
				if err := a.T.Transfer(ctx, peer, ops, res); err != nil || res[0].Err != nil {
					t.Fatalf("transfer: %v / %v", err, res[0].Err)
				}
			}
			tr := a.T.(*Transport)
			tr.mu.Lock()
			p := tr.peers[peer]
			tr.mu.Unlock()
			spun := p.lone.caught.Load() + p.lone.slept.Load()
			if want := map[bool]uint64{true: rounds, false: 0}[tc.wantSpins]; spun != want {
				t.Fatalf("%d of %d batches spun for their response (caught %d), want %d", spun, rounds, p.lone.caught.Load(), want)
			}
		})
	}
}
