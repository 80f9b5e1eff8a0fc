package main

import "testing"

// TestBatchCallsOnAClosedEngineSayClosed: close cancels and forgets every
// batch, so kvc_batch_wait and kvc_batch_free on one of them, called
// while close runs (the handle still names the engine) or on an engine
// closed before it was initialized, say KVC_ERR_CLOSED, not that the
// batch never existed. An id an open engine never gave out still says
// KVC_ERR_UNKNOWN_BATCH.
func TestBatchCallsOnAClosedEngineSayClosed(t *testing.T) {
	closed := newEngine(1)
	canceled := false
	closed.batches[1] = &batch{cancel: func() { canceled = true }, n: 1}
	if err := closed.close(); err != nil {
		t.Fatal(err)
	}
	if !canceled {
		t.Fatal("close did not cancel the batch")
	}
	open := newEngine(2)
	for _, c := range []struct {
		name string
		call func() error
		want int
	}{
		{"wait, closed engine", func() error { _, _, err := closed.wait(1, 0, nil); return err }, codeClosed},
		{"free, closed engine", func() error { return closed.free(1) }, codeClosed},
		{"wait, open engine", func() error { _, _, err := open.wait(7, 0, nil); return err }, codeUnknownBatch},
		{"free, open engine", func() error { return open.free(7) }, codeUnknownBatch},
	} {
		if got := codeOf(c.call()); got != c.want {
			t.Errorf("%s: code %d, want %d", c.name, got, c.want)
		}
	}
}
