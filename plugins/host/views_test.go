//go:build linux

package host

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/kvconnect/kvconnect/errdefs"
	"github.com/kvconnect/kvconnect/internal/shm"
	"github.com/kvconnect/kvconnect/plugins"
)

// memTransport is a transport that records the memory of the regions
// registered with it; every other call succeeds or does nothing.
type memTransport struct {
	mu      sync.Mutex
	regions map[plugins.RegionID][]byte
	closed  bool
}

func (m *memTransport) Info(context.Context) (plugins.Info, error) {
	return plugins.Info{Name: "mem", APIVersion: plugins.APIVersion, Capabilities: plugins.CapRead | plugins.CapWrite}, nil
}
func (m *memTransport) Init(context.Context, plugins.InitRequest) (plugins.InitResult, error) {
	return plugins.InitResult{Endpoint: []byte("mem")}, nil
}
func (m *memTransport) Close(context.Context) error {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	return nil
}
func (m *memTransport) RegisterRegion(_ context.Context, r plugins.Region) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.regions == nil {
		m.regions = map[plugins.RegionID][]byte{}
	}
	if _, dup := m.regions[r.ID]; dup {
		return nil, fmt.Errorf("mem: region %d: %w", r.ID, errdefs.ErrInvalidArgument)
	}
	m.regions[r.ID] = r.Mem
	return append([]byte(nil), r.Mem[:min(8, len(r.Mem))]...), nil
}
func (m *memTransport) DeregisterRegion(_ context.Context, id plugins.RegionID) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.regions[id]; !ok {
		return fmt.Errorf("mem: region %d: %w", id, errdefs.ErrUnknownRegion)
	}
	delete(m.regions, id)
	return nil
}
func (m *memTransport) Connect(context.Context, plugins.PeerInfo) (plugins.PeerID, error) {
	return 1, nil
}
func (m *memTransport) Disconnect(context.Context, plugins.PeerID) error { return nil }
func (m *memTransport) Transfer(_ context.Context, _ plugins.PeerID, ops []plugins.Op, res []plugins.OpResult) error {
	plugins.FillResults(res, nil)
	return nil
}

// memfdsNamed counts this process's descriptors of memfds named name.
func memfdsNamed(name string) int {
	ents, _ := os.ReadDir("/proc/self/fd")
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.HasPrefix(l, "/memfd:kvconnect:"+name+" ") {
			n++
		}
	}
	return n
}

// eventfds counts this process's open eventfds (rings' doorbells: both
// ends, in memory).
func eventfds() int {
	ents, _ := os.ReadDir("/proc/self/fd")
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && l == "anon_inode:[eventfd]" {
			n++
		}
	}
	return n
}

// TestFileViewsCrossOnce: regions of one file cross the fd channel once
// and are mapped once by the plugin side; the view is unmapped and its
// descriptor closed when the last region of the file is deregistered; a
// region that does not fit its file is refused.
func TestFileViewsCrossOnce(t *testing.T) {
	mt := &memTransport{}
	tr, err := InMemory(mt, "mem", zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close(context.Background())
	ctx := context.Background()
	if _, err := tr.Init(ctx, plugins.InitRequest{}); err != nil {
		t.Fatal(err)
	}
	const per = 100
	slabs := []*shm.Segment{newSegmentNamed(t, "views-a", per*4096), newSegmentNamed(t, "views-b", per*4096)}
	id := plugins.RegionID(0)
	for s, seg := range slabs {
		for i := 0; i < per; i++ {
			id++
			mem := seg.Bytes()[i*4096 : i*4096+4096]
			copy(mem, fmt.Sprintf("%d-%d", s, i))
			key, err := tr.RegisterRegion(ctx, plugins.Region{ID: id, Addr: uint64(id) << 20, Mem: mem, File: seg.File(), FileOffset: uint64(i * 4096)})
			if err != nil {
				t.Fatal(err)
			}
			if want := fmt.Sprintf("%d-%d", s, i); !strings.HasPrefix(string(key), want) {
				t.Fatalf("region %d: the plugin side reads %q, want %q", id, key, want)
			}
		}
	}
	// The host holds one descriptor of each file, the plugin side one more.
	if a, b := memfdsNamed("views-a"), memfdsNamed("views-b"); a != 2 || b != 2 {
		t.Fatalf("descriptors of the files: %d and %d, want 2 each (the host's and the plugin's)", a, b)
	}
	// Past the end of the file.
	seg := slabs[0]
	if _, err := tr.RegisterRegion(ctx, plugins.Region{ID: 999, Addr: 999 << 20, Mem: seg.Bytes()[:4096], File: seg.File(), FileOffset: per*4096 - 100}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("a region past the end of its file: %v, want ErrInvalidArgument", err)
	}
	for i := plugins.RegionID(1); i <= per; i++ {
		if err := tr.DeregisterRegion(ctx, i); err != nil {
			t.Fatal(err)
		}
		if i == per-1 && memfdsNamed("views-a") != 2 {
			t.Fatal("the view closed before its last region went")
		}
	}
	if a, b := memfdsNamed("views-a"), memfdsNamed("views-b"); a != 1 || b != 2 {
		t.Fatalf("after deregistering every region of the first file: %d and %d descriptors, want 1 and 2", a, b)
	}
	// The file comes back: it crosses again, as a new view.
	if _, err := tr.RegisterRegion(ctx, plugins.Region{ID: 1, Addr: 1 << 20, Mem: seg.Bytes()[:4096], File: seg.File()}); err != nil {
		t.Fatal(err)
	}
	if a := memfdsNamed("views-a"); a != 2 {
		t.Fatalf("a released file registered again: %d descriptors, want 2", a)
	}
	if err := tr.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if a, b := memfdsNamed("views-a"), memfdsNamed("views-b"); a != 1 || b != 1 {
		t.Fatalf("after Close: %d and %d descriptors, want only the host's", a, b)
	}
}

// newSegmentNamed is a shared-memory segment named name, freed when the
// test ends.
func newSegmentNamed(t *testing.T, name string, size int) *shm.Segment {
	t.Helper()
	seg, err := shm.New(name, size)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { seg.Close() })
	return seg
}
