package tcp

import (
	"context"
	"testing"
	"time"

	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/plugins/transporttest"
)

// TestLoneOpWaitCountsFromItsSend: the wait a lone op's Chooser observes
// runs from the moment its request was sent, so a caller descheduled
// between its write and its read (here held for a known time by the
// test hook) is seen to wait that long; measured from the read, the
// answer is already there and the wait looks like nothing, whichever way
// the op waited (lonespin.go).
func TestLoneOpWaitCountsFromItsSend(t *testing.T) {
	const held = 5 * time.Millisecond
	hooked := 0
	testAfterLoneWrite = func() {
		hooked++
		time.Sleep(held) // a caller descheduled after its write, for a known time
	}
	t.Cleanup(func() { testAfterLoneWrite = nil })

	h := transporttest.Harness{New: func(*testing.T) plugins.Transport { return New() }, Options: []byte(`{"connections":1}`)}
	a, b := transporttest.NewNode(t, h, "a"), transporttest.NewNode(t, h, "b")
	src, dst := a.Alloc(t, 1<<20, 0), b.Alloc(t, 1<<20, 0)
	peer := a.Connect(t, b)
	ops := []plugins.Op{{Kind: plugins.OpWrite, LocalRegion: src.ID, RemoteRegion: dst.ID, Length: 4096}}
	res := make([]plugins.OpResult, 1)
	const rounds = 8
	for range rounds {
		if err := a.T.Transfer(context.Background(), peer, ops, res); err != nil || res[0].Err != nil {
			t.Fatalf("transfer: %v / %v", err, res[0].Err)
		}
	}
	if hooked != rounds {
		t.Fatalf("the hook ran for %d of %d lone ops: they were not read by their callers", hooked, rounds)
	}
	tr := a.T.(*Transport)
	tr.mu.Lock()
	p := tr.peers[peer]
	tr.mu.Unlock()
	// Every wait observed includes the hook's hold, so their mean does too.
	if mean := p.rtt.Mean(); mean < held {
		t.Fatalf("the lone ops' observed wait is %v on average, less than the %v each caller was held after its write: the wait is not counted from the send", mean, held)
	}
}
