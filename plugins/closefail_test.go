package plugins

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/kvconnect/kvconnect/internal/pluginrpc/proto"
	"github.com/kvconnect/kvconnect/internal/shm"
)

// failingClose is a transport whose first Close fails (an op still holds
// a region: its wait timed out) and whose later ones answer nil, as a
// Guard-based transport's do.
type failingClose struct {
	Transport
	calls atomic.Int32
}

func (f *failingClose) Close(context.Context) error {
	if f.calls.Add(1) == 1 {
		return errors.New("an op still uses a region: " + ErrTimeout.Error())
	}
	return nil
}

// TestRegionsStayMappedAfterAFailedClose: when the host's Close failed
// (the transport may still run ops on region memory), the plugin's exit
// (shutdown) does not unmap the regions either: a second Close that a
// transport answers with nil says nothing of the ops the first left.
func TestRegionsStayMappedAfterAFailedClose(t *testing.T) {
	s := newServer(&failingClose{}, zaptest.NewLogger(t), nil)
	seg, err := shm.New("closefail-test", 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer seg.Close()
	s.segs[1] = seg
	if _, err := s.Close(context.Background(), &proto.CloseRequest{}); err == nil {
		t.Fatal("Close: nil, want the transport's failure")
	}
	s.shutdown()
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "closefail-test") {
		t.Fatal("the region was unmapped at exit after the transport's Close had failed: an op it left running would touch unmapped memory")
	}
}
