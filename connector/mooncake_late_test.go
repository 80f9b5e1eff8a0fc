//go:build linux

package connector_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kvconnect/kvconnect/connector"
	"github.com/kvconnect/kvconnect/internal/testbin"
	"github.com/kvconnect/kvconnect/plugins/transporttest"
)

// TestGivenUpWriteToMooncakeTargetIsReset: a node writes to an unmodified
// Mooncake target (transfer_engine_bench) that is stopped (SIGSTOP); the
// WRITE times out and its lane is reset: no socket on this host is left
// holding the WRITE's unsent bytes for the target (a plain close leaves
// them in FIN_WAIT1, and the kernel delivers them once the target runs).
// When the target runs again, its buffer holds what was written before
// the stop except, at most, a prefix: what Mooncake's kernel had received
// before the give-up, which Mooncake's protocol cannot take back (see
// docs/RELIABILITY.md, "A WRITE given up on").
func TestGivenUpWriteToMooncakeTargetIsReset(t *testing.T) {
	ctx := context.Background()
	cfg := connector.Config{Protocol: "tcp", PluginDir: pluginDir(t), TransferTimeout: 20 * time.Second,
		Transports: map[string]map[string]any{"tcp": {"op_timeout": "1s", "mooncake_lanes": 1, "chunk_size": "16MiB"}}}
	c, err := connector.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	session, _, proc := mooncakeTargetProc(t, c)
	peer, err := c.Open(ctx, session)
	if err != nil {
		t.Fatal(err)
	}
	var d connector.SegmentDescriptor
	if err := json.Unmarshal(mooncakeMetadata(t, session), &d); err != nil || d.TCPDataPort == 0 {
		t.Fatalf("the Mooncake target's descriptor: %v (data port %d)", err, d.TCPDataPort)
	}
	const size = 16 << 20
	src, back := alloc(t, c, size), alloc(t, c, size)
	remote := peer.Regions()[0].Addr
	transporttest.Fill(src.Bytes(), 1)
	if err := c.TransferSyncWrite(ctx, session, src.Addr(), remote, size); err != nil {
		t.Fatal(err)
	}
	before := bytes.Clone(src.Bytes())

	testbin.Stop(t, proc.Pid, false)
	defer proc.Signal(syscall.SIGCONT)
	transporttest.Fill(src.Bytes(), 2)
	err = c.TransferSyncWrite(ctx, session, src.Addr(), remote, size)
	if !errors.Is(err, connector.ErrTimeout) {
		t.Fatalf("a WRITE to a stopped Mooncake target: %v, want ErrTimeout", err)
	}
	if q := queuedTo(t, d.TCPDataPort); q > 0 {
		t.Fatalf("%d bytes of the given-up WRITE are still queued for the Mooncake target's data port (a closed lane, not a reset one): they would land once it runs", q)
	}
	if err := proc.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	// Read the buffer back once the target answers again (the peer is
	// suspect until its prober sees it).
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := c.TransferSyncRead(ctx, session, back.Addr(), remote, size)
		if err == nil {
			break
		}
		if !errors.Is(err, connector.ErrPeerUnreachable) || time.Now().After(deadline) {
			t.Fatalf("READ after SIGCONT: %v", err)
		}
		time.Sleep(50 * time.Millisecond) // polling for the prober
	}
	got, given := back.Bytes(), src.Bytes()
	landed := 0 // got is the given-up WRITE up to here
	for landed < size && got[landed] == given[landed] {
		landed++
	}
	t.Logf("%d bytes of the given-up WRITE landed (the prefix the stopped target's kernel had received)", landed)
	if !bytes.Equal(got[landed:], before[landed:]) {
		t.Fatal("the buffer holds neither what was written before the stop nor a prefix of the given-up WRITE followed by it")
	}
	if landed >= size/2 {
		t.Fatalf("%d of the given-up WRITE's %d bytes landed after the target resumed", landed, size)
	}
}

// queuedTo sums the send queues (bytes not yet acknowledged by the peer)
// of this host's TCP sockets connected to port on the loopback.
func queuedTo(t *testing.T, port int) int {
	t.Helper()
	total := 0
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fields := strings.Fields(line)
			if len(fields) < 5 {
				continue
			}
			_, rport, _ := strings.Cut(fields[2], ":")
			p, _ := strconv.ParseInt(rport, 16, 32)
			if int(p) != port {
				continue
			}
			tx, _, _ := strings.Cut(fields[4], ":")
			q, _ := strconv.ParseInt(tx, 16, 64)
			total += int(q)
		}
	}
	return total
}
