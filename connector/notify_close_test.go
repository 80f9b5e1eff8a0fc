package connector_test

import (
	"context"
	"testing"
	"time"

	"github.com/kvconnect/kvconnect/connector"
	"github.com/kvconnect/kvconnect/internal/testbin"
)

// TestNotificationReceivedBeforeCloseIsAnswered: a node that reads a
// notification and closes at once (a decode node done with its request)
// still answers it, so the sender's Notify succeeds. Close used to cut the
// connection between the delivery and the answer, and the sender got an
// error for a message that had arrived. The answer here waits until the
// receiver is closing, the widest that window gets.
func TestNotificationReceivedBeforeCloseIsAnswered(t *testing.T) {
	a, b := newNode(t), newNode(t)
	defer connector.SetAfterDeliver(func(c *connector.Connector) {
		if c == b {
			<-connector.Closing(b)
		}
	})()
	ctx, cancel := context.WithTimeout(context.Background(), testbin.WaitLimit)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- a.Notify(ctx, b.SessionID(), "kv_done", "req-7") }()
	select {
	case n := <-b.Notifications():
		if n.Name != "kv_done" || n.Msg != "req-7" {
			t.Fatalf("notification %+v", n)
		}
	case <-time.After(testbin.WaitLimit):
		t.Fatal("no notification")
	}
	start := time.Now()
	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("Notify of a notification the receiver got before closing: %v", err)
	}
	t.Logf("Close took %v", time.Since(start))
}
