//go:build linux

package host

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"

	"github.com/kvconnect/kvconnect/errdefs"
	"github.com/kvconnect/kvconnect/internal/pluginrpc/proto"
	"github.com/kvconnect/kvconnect/internal/ring"
	"github.com/kvconnect/kvconnect/internal/testbin"
	"github.com/kvconnect/kvconnect/plugins"
)

// slowRegisterTransport holds RegisterRegion until release is closed,
// then reads the region's memory, as a transport pinning it would. Close
// closes closing and makes later registrations fail with ErrClosed.
type slowRegisterTransport struct {
	memTransport
	entered, release, closing chan struct{}
	closeOnce                 sync.Once
}

func (s *slowRegisterTransport) Close(ctx context.Context) error {
	s.closeOnce.Do(func() { close(s.closing) })
	return s.memTransport.Close(ctx)
}

func (s *slowRegisterTransport) RegisterRegion(ctx context.Context, r plugins.Region) ([]byte, error) {
	close(s.entered)
	<-s.release
	sum := 0
	for _, b := range r.Mem { // faults if the plugin side unmapped it
		sum += int(b)
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return nil, fmt.Errorf("slow: region %d (sum %d): %w", r.ID, sum, errdefs.ErrClosed)
	}
	return s.memTransport.RegisterRegion(ctx, r)
}

// TestCloseWaitsForRegistration: Close does not unmap region memory
// while a registration under way still uses it, and a registration that
// starts after Close began fails with ErrClosed, not with an error about
// the unmapped view (the CI failure of CloseDuringRegisterRegion).
func TestCloseWaitsForRegistration(t *testing.T) {
	for _, view := range []bool{false, true} {
		t.Run(fmt.Sprintf("view=%v", view), func(t *testing.T) {
			st := &slowRegisterTransport{entered: make(chan struct{}), release: make(chan struct{}), closing: make(chan struct{})}
			tr, err := InMemory(st, "slow", zaptest.NewLogger(t))
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close(context.Background())
			ctx := context.Background()
			if _, err := tr.Init(ctx, plugins.InitRequest{}); err != nil {
				t.Fatal(err)
			}
			seg := newSegmentNamed(t, "closereg", 2*4096)
			mem := seg.Bytes()[:4096]
			offset := uint64(0)
			if view {
				// A region that is a slice of its file is registered as a
				// view of the file.
				mem, offset = seg.Bytes()[4096:], 4096
			}
			regErr := make(chan error, 1)
			go func() {
				_, err := tr.RegisterRegion(ctx, plugins.Region{ID: 1, Addr: 1 << 20, Mem: mem, File: seg.File(), FileOffset: offset})
				regErr <- err
			}()
			<-st.entered
			closeErr := make(chan error, 1)
			go func() { closeErr <- tr.Close(ctx) }()
			<-st.closing
			// Close has closed the transport; give it the chance to unmap
			// before the registration reads the memory. Without the wait for
			// registrations under way, Close returns here and the read
			// below faults.
			select {
			case err := <-closeErr:
				t.Fatalf("Close returned (%v) while a registration was still reading its region", err)
			case <-time.After(100 * time.Millisecond):
			}
			close(st.release)
			if err := <-regErr; err != nil && !errors.Is(err, errdefs.ErrClosed) {
				t.Fatalf("the registration under way at Close: %v, want nil or ErrClosed", err)
			}
			if err := <-closeErr; err != nil {
				t.Fatalf("Close: %v", err)
			}
		})
	}
}

// heldOpenRing lets OpenRing reach the plugin, then holds its answer
// until release is closed.
type heldOpenRing struct {
	proto.TransportClient
	opened, release chan struct{}
}

func (h *heldOpenRing) OpenRing(ctx context.Context, in *proto.OpenRingRequest, opts ...grpc.CallOption) (*proto.OpenRingResponse, error) {
	resp, err := h.TransportClient.OpenRing(ctx, in, opts...)
	close(h.opened)
	<-h.release
	return resp, err
}

// TestCloseDuringRingOpening: a Close that runs while Init is opening the
// ring (the plugin has served OpenRing, its answer is on its way) leaves
// no ring behind: the late answer's ring is closed, not published, so a
// Transfer after Close fails at once with ErrClosed instead of waiting on
// a ring nobody reads, and the ring's memory and doorbell are released.
func TestCloseDuringRingOpening(t *testing.T) {
	if !ring.Supported {
		t.Skip("no rings on this platform (futexes are Linux's)")
	}
	tr, err := InMemory(&memTransport{}, "held", zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close(context.Background())
	c := clientOf(tr)
	held := &heldOpenRing{TransportClient: c.rpc, opened: make(chan struct{}), release: make(chan struct{})}
	c.rpc = held // before any call that uses it
	rings := memfdsNamed("ring")
	initErr := make(chan error, 1)
	go func() {
		_, err := tr.Init(context.Background(), plugins.InitRequest{})
		initErr <- err
	}()
	<-held.opened
	if err := tr.Close(context.Background()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	close(held.release)
	if err := <-initErr; err != nil {
		t.Fatalf("Init: %v", err)
	}
	if dp := DataPath(tr); dp == "ring" {
		t.Fatalf("after Close, the transport's data path is %q: the ring opened during Close was published", dp)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res := make([]plugins.OpResult, 1)
	if err := tr.Transfer(ctx, 1, []plugins.Op{{Kind: plugins.OpWrite, LocalRegion: 1, RemoteRegion: 1, Length: 1}}, res); !errors.Is(err, errdefs.ErrClosed) {
		t.Fatalf("Transfer after Close: %v, want ErrClosed", err)
	}
	if n := memfdsNamed("ring"); n != rings {
		t.Fatalf("%d ring memfds open after Close, %d before Init: the ring leaked", n, rings)
	}
}

// TestCloseOfAPluginThatDiesClosing: a plugin process that ends during
// Close, before it answers, has closed as far as its host is concerned:
// Close returns nil, not an error saying the plugin was closed.
func TestCloseOfAPluginThatDiesClosing(t *testing.T) {
	isolate(t)
	p, err := Launch(t.Context(), LaunchConfig{Name: "fake", Path: buildTestdata(t, "fakeplugin"), Logger: zaptest.NewLogger(t),
		Env: []string{"FAKEPLUGIN_CLOSE=exit"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Init(t.Context(), plugins.InitRequest{}); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(context.Background()); err != nil {
		t.Fatalf("Close of a plugin that exits while closing: %v, want nil", err)
	}
	assertNoChildren(t)
}

// TestCloseOfAPluginThatStoppedAnswering: Close of a plugin that answers
// nothing (stopped by SIGSTOP here; wedged in a driver call in the field)
// ends within its ctx: the shutdown request go-plugin sends without a
// time limit would otherwise hold Close forever. The process is killed
// and reaped.
func TestCloseOfAPluginThatStoppedAnswering(t *testing.T) {
	isolate(t)
	p, err := Launch(t.Context(), LaunchConfig{Name: "fake", Path: buildTestdata(t, "fakeplugin"), Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Init(t.Context(), plugins.InitRequest{}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(p.Pid(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	closed := make(chan error, 1)
	go func() { closed <- p.Close(ctx) }()
	select {
	case err := <-closed:
		if !errors.Is(err, errdefs.ErrTimeout) {
			t.Errorf("Close of a plugin that answers nothing: %v, want ErrTimeout", err)
		}
	case <-time.After(2 * time.Minute):
		syscall.Kill(p.Pid(), syscall.SIGKILL)
		t.Fatal("Close of a plugin that answers nothing still running after 2 minutes")
	}
	assertNoChildren(t)
}

// TestCloseWithoutDeadlineOfAPluginThatStoppedAnswering: with a ctx that
// has no deadline, Close of a plugin that answers nothing still ends
// (killWait bounds its Close request too), and the process is reaped.
func TestCloseWithoutDeadlineOfAPluginThatStoppedAnswering(t *testing.T) {
	isolate(t)
	defer func(d time.Duration) { killWait = d }(killWait)
	killWait = time.Second
	p, err := Launch(t.Context(), LaunchConfig{Name: "fake", Path: buildTestdata(t, "fakeplugin"), Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Init(t.Context(), plugins.InitRequest{}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(p.Pid(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	go func() { closed <- p.Close(context.Background()) }()
	select {
	case err := <-closed:
		if !errors.Is(err, errdefs.ErrTimeout) {
			t.Errorf("Close of a plugin that answers nothing: %v, want ErrTimeout", err)
		}
	case <-time.After(2 * time.Minute):
		syscall.Kill(p.Pid(), syscall.SIGKILL)
		t.Fatal("Close(context.Background()) of a plugin that answers nothing still running after 2 minutes")
	}
	assertNoChildren(t)
}

// TestCloseOfAPluginWhoseChildHoldsItsOutput: a plugin that started a
// process inheriting its stdout and stderr (a helper, a wrapper script's
// background job) still closes, and is reaped: go-plugin reads the output
// to its end before it reaps the plugin, and that end would never come.
func TestCloseOfAPluginWhoseChildHoldsItsOutput(t *testing.T) {
	isolate(t)
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	p, err := Launch(t.Context(), LaunchConfig{Name: "fake", Path: buildTestdata(t, "fakeplugin"), Logger: zaptest.NewLogger(t),
		Env: []string{"FAKEPLUGIN_CHILD=" + pidFile}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		p.Close(context.Background())
		t.Fatal(err)
	}
	child, _ := strconv.Atoi(string(b))
	t.Cleanup(func() { syscall.Kill(child, syscall.SIGKILL) })
	pid := p.Pid()
	closed := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		closed <- p.Close(ctx)
	}()
	select {
	case err := <-closed:
		if err != nil {
			t.Errorf("Close: %v", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("Close of a plugin whose child holds its stdout/stderr still running after 2 minutes")
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("after Close, kill(%d, 0) = %v, want ESRCH (reaped)", pid, err)
	}
	if err := syscall.Kill(child, 0); err != nil {
		t.Errorf("the plugin's child is gone too (%v): the test did not hold the output open", err)
	}
}

// TestSecondCloseWaitsForTheFirst: a Close while another is under way
// returns once the process has been reaped, as its doc says, not at once.
func TestSecondCloseWaitsForTheFirst(t *testing.T) {
	isolate(t)
	p, err := Launch(t.Context(), LaunchConfig{Name: "fake", Path: buildTestdata(t, "fakeplugin"), Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	pid := p.Pid()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil { // the first Close takes its time
		t.Fatal(err)
	}
	first := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		first <- p.Close(ctx)
	}()
	testbin.Eventually(t, "the first Close under way", func() bool {
		p.closeMu.Lock()
		defer p.closeMu.Unlock()
		return p.closed
	})
	if err := p.Close(context.Background()); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("when the second Close returned, kill(%d, 0) = %v, want ESRCH (reaped)", pid, err)
	}
	<-first
	assertNoChildren(t)
}
