package plugins

import (
	"testing"
	"time"

	"github.com/kvconnect/kvconnect/internal/ring"
)

// TestSleeperHandsOffWhileConcurrent: the SQ sleeper keeps its processor
// while batches come one at a time (a lone op's wake-up resumes at
// once) and hands it off while they come concurrently, until the sign
// of concurrency lapses.
func TestSleeperHandsOffWhileConcurrent(t *testing.T) {
	var s ringServer
	if got := s.sleepWait(); got != ring.Brief {
		t.Fatalf("a fresh ring's sleeper sleeps %s, want %s", got, ring.Brief)
	}
	s.sawConcurrency()
	if got := s.sleepWait(); got != ring.Handoff {
		t.Fatalf("after concurrent batches the sleeper sleeps %s, want %s", got, ring.Handoff)
	}
	s.concurrentUntil.Store(time.Now().Add(-time.Millisecond).UnixNano())
	if got := s.sleepWait(); got != ring.Brief {
		t.Fatalf("once concurrency lapsed the sleeper sleeps %s, want %s", got, ring.Brief)
	}
}
