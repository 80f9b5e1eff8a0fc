//go:build linux

package connector_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/kvconnect/kvconnect/config"
	"github.com/kvconnect/kvconnect/connector"
	"github.com/kvconnect/kvconnect/internal/testbin"
)

// TestHandshakeMemoryBoundedUnderFlood is floodNode with 48 attackers
// (twice what the requests' share of the default 64 MiB holds) and a
// descriptor of 2,000 regions; TestHandshakeMemoryBoundedUnderFullFlood
// (make test-long) with the 300 attackers and 20,000 regions that
// measured the problem.
func TestHandshakeMemoryBoundedUnderFlood(t *testing.T) {
	floodNode(t, 48, 2_000)
}

func TestHandshakeMemoryBoundedUnderFullFlood(t *testing.T) {
	testbin.Long(t, "300 connections sending 1 MB each, again and again, beside a 20,000-region descriptor")
	floodNode(t, 300, 20_000)
}

// floodNode: attackers unauthenticated connections at a time to a node's
// RPC port, each announcing a 16 MiB Metadata frame and sending 1 MB of
// it (again as soon as the node drops it). The node holds at most
// max_handshake_memory for them, whatever their number (its accounting
// reaches the requests' share and never passes the limit), refuses what
// does not fit in time with an error frame naming the setting, and its
// RSS grows by at most 100 MiB. Meanwhile a real peer opens it and
// fetches its descriptor of regions regions (20,000: ~1.5 MB). Before the
// budget, 300 attackers grew a node's RSS by ~390 MB.
func floodNode(t *testing.T, attackers, regions int) {
	const (
		announced = 16 << 20 // max_handshake_frame
		sent      = 1 << 20
	)
	// Last: give the flood's heap back to the system now, so the runtime
	// does not spend the next tests' time returning it.
	defer debug.FreeOSMemory()
	ctx := context.Background()
	cfg := connector.Config{Protocol: "tcp", Hostname: "127.0.0.1"}
	node, err := connector.New(ctx, cfg, connector.WithInProcess("tcp"), connector.WithLogger(zaptest.NewLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	for i := 0; i < regions; i++ {
		if _, err := node.Alloc(ctx, 4096); err != nil {
			t.Fatal(err)
		}
	}
	peerNode, err := connector.New(ctx, connector.Config{Protocol: "tcp", Hostname: "127.0.0.1", ConnectTimeout: time.Minute},
		connector.WithInProcess("tcp"), connector.WithLogger(zaptest.NewLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer peerNode.Close()

	runtime.GC()
	rss0 := procStatus(t, "VmRSS")
	resetPeakRSS(t)

	// The flood: each attacker sends its frame's first MB, then waits
	// for the node to answer or drop it, and starts again.
	hdr := make([]byte, 9)
	binary.LittleEndian.PutUint64(hdr, announced)
	hdr[8] = 1 // Metadata
	payload := make([]byte, sent)
	stop := make(chan struct{})
	refusal := make(chan string, 1)
	var wg sync.WaitGroup
	var mu sync.Mutex
	open := map[net.Conn]bool{}
	for i := 0; i < attackers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				nc, err := net.Dial("tcp", node.SessionID())
				if err != nil { // out of descriptors, say: back off, then dial again
					select {
					case <-stop:
						return
					case <-time.After(10 * time.Millisecond):
					}
					continue
				}
				mu.Lock()
				open[nc] = true
				mu.Unlock()
				nc.Write(hdr)
				nc.Write(payload)
				if reply, err := io.ReadAll(io.LimitReader(nc, 4096)); err == nil && len(reply) > 9 && reply[8] == 0xFF {
					select {
					case refusal <- string(reply[9:]):
					default:
					}
				}
				mu.Lock()
				delete(open, nc)
				mu.Unlock()
				nc.Close()
			}
		}()
	}
	var once sync.Once
	stopFlood := func() {
		once.Do(func() {
			close(stop)
			mu.Lock()
			for nc := range open {
				nc.Close()
			}
			mu.Unlock()
			wg.Wait()
		})
	}
	defer stopFlood()

	// The flood is on once the requests' share is held and more wait.
	limit := int64(node.Status().HandshakeMemory.Limit)
	share := (limit - config.HandshakeSmallReserve) / 2
	testbin.Eventually(t, "the flood to fill the requests' share of the handshake memory", func() bool {
		hm := node.Status().HandshakeMemory
		return hm.InUse >= share-1<<20 && hm.Waiting > 0
	})

	// A real peer opens the node meanwhile: its request is small and
	// finds the reserve; the 1.5 MB descriptor comes back whole.
	peer, err := peerNode.Open(ctx, node.SessionID())
	if err != nil {
		t.Fatalf("a real peer could not open the node under the flood: %v (node: %+v)", err, node.Status().HandshakeMemory)
	}
	if got := len(peer.Regions()); got != regions {
		t.Fatalf("the peer sees %d regions, want %d", got, regions)
	}
	during := node.Status().HandshakeMemory
	t.Logf("under the flood: %+v", during)

	// What did not fit in time is refused, saying why.
	select {
	case body := <-refusal:
		var er struct{ Error, Kind string }
		if err := json.Unmarshal([]byte(body), &er); err != nil || er.Kind != "resource_exhausted" ||
			!strings.Contains(er.Error, "max_handshake_memory 64MiB") {
			t.Fatalf("the refusal %q does not name max_handshake_memory (kind resource_exhausted)", body)
		}
	case <-time.After(time.Minute):
		t.Fatal("no attacker was refused within a minute")
	}

	hm := node.Status().HandshakeMemory
	if hm.Peak > hm.Limit || hm.Peak < share-1<<20 {
		t.Fatalf("handshake memory peaked at %d bytes: want between the requests' share %d and the limit %d", hm.Peak, share, hm.Limit)
	}
	growth, bound := procStatus(t, "VmHWM")-rss0, int64(rssBound)
	if raceDetector {
		bound *= 4 // the race detector's shadow memory: measured ~4x here
	}
	t.Logf("RSS %d MiB before the flood, peak growth %d MiB (bound %d MiB); handshake memory %+v", rss0>>20, growth>>20, bound>>20, hm)
	if growth > bound {
		t.Fatalf("RSS grew by %d MiB under the flood (bound %d MiB)", growth>>20, bound>>20)
	}

	// Once the flood stops, everything is given back.
	stopFlood()
	testbin.Eventually(t, "the handshake memory to be given back", func() bool {
		hm := node.Status().HandshakeMemory
		return hm.InUse == 0 && hm.Waiting == 0
	})
	if err := peer.Close(ctx); err != nil && !errors.Is(err, connector.ErrClosed) {
		t.Fatal(err)
	}
}

// rssBound is how much the process's RSS (the node, the peer and the
// attackers) may grow under the flood, without the race detector.
const rssBound = 100 << 20

// procStatus reads a /proc/self/status field given in kB, in bytes.
func procStatus(t *testing.T, field string) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skipf("no /proc/self/status: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("%s: %q", field, line)
			}
			return kb << 10
		}
	}
	t.Fatalf("no %s in /proc/self/status", field)
	return 0
}

// resetPeakRSS makes VmHWM start again from the current RSS.
func resetPeakRSS(t *testing.T) {
	t.Helper()
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		t.Skipf("cannot reset the peak RSS: %v", err)
	}
	if hwm, rss := procStatus(t, "VmHWM"), procStatus(t, "VmRSS"); hwm > rss+bytes.MinRead<<10 {
		t.Skipf("VmHWM %d did not reset to VmRSS %d", hwm, rss)
	}
}
