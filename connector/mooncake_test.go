package connector_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvconnect/kvconnect/connector"
	"github.com/kvconnect/kvconnect/internal/testbin"
)

// EnvMooncakeBin names the directory holding unmodified Mooncake Transfer
// Engine binaries (transfer_engine_bench, transfer_engine_validator);
// .ci/run sets it to ../shared/mooncake/bin.
const EnvMooncakeBin = "KVCONNECT_MOONCAKE_BIN"

// mooncakeBin returns the path of a Mooncake binary, skipping the test
// when the variable is unset.
func mooncakeBin(t *testing.T, name string) string {
	t.Helper()
	dir := os.Getenv(EnvMooncakeBin)
	if dir == "" {
		t.Skipf("set %s to the directory holding Mooncake's transfer_engine_bench and transfer_engine_validator (e.g. ../shared/mooncake/bin) to run the interop tests", EnvMooncakeBin)
	}
	p := filepath.Join(dir, name)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s=%s but %s is not there: %v", EnvMooncakeBin, dir, name, err)
	}
	return p
}

// mooncake runs a Mooncake binary to completion (bounded) and returns its
// output and exit code.
func mooncake(t *testing.T, bin string, env []string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	code := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("running %s: %v", bin, err)
	}
	if ctx.Err() != nil {
		t.Fatalf("%s did not finish within 120 s:\n%s", filepath.Base(bin), out)
	}
	return string(out), code
}

// mooncakeArgs are the flags every Mooncake initiator run here takes.
func mooncakeArgs(session string, extra ...string) []string {
	return append([]string{"--mode=initiator", "--protocol=tcp", "--metadata_server=P2PHANDSHAKE",
		"--local_server_name=127.0.0.1:12346", "--segment_id=" + session}, extra...)
}

// poolMode is one of Mooncake's client connection modes and protocol
// versions, by its environment.
type poolMode struct {
	name string
	env  []string
}

// poolModes are Mooncake's two client connection modes, and its two
// protocol versions.
var poolModes = []poolMode{
	{"v2", nil},
	{"v2-pool", []string{"MC_TCP_ENABLE_CONNECTION_POOL=1"}},
	{"v1", []string{"MC_TCP_PROTO=1"}},
	{"v1-pool", []string{"MC_TCP_PROTO=1", "MC_TCP_ENABLE_CONNECTION_POOL=1"}},
}

// TestMooncakeValidatorAgainstNode: Mooncake's own validator, as
// initiator, writes blocks into a kvconnect node, reads them back and
// compares, over both protocol versions and both connection modes.
func TestMooncakeValidatorAgainstNode(t *testing.T) {
	bin := mooncakeBin(t, "transfer_engine_validator")
	node := newNode(t)
	alloc(t, node, 64<<20)
	for _, m := range poolModes {
		t.Run(m.name, func(t *testing.T) {
			out, code := mooncake(t, bin, m.env, mooncakeArgs(node.SessionID(),
				"--block_size=65536", "--batch_size=16", "--threads=2", "--duration=1")...)
			if code != 0 || strings.Count(out, "Data validation passed") != 2 || strings.Contains(out, "integrity") {
				t.Fatalf("validator exited %d:\n%s", code, out)
			}
		})
	}
}

// TestMooncakeBenchAgainstNode: Mooncake's bench, as initiator, writes to
// and reads from a kvconnect node, in Mooncake's default mode (the
// validator runs in every mode; the bench in the others is
// TestMooncakeBenchAgainstNodeAllModes').
func TestMooncakeBenchAgainstNode(t *testing.T) {
	mooncakeBenchAgainstNode(t, poolModes[:1])
}

// TestMooncakeBenchAgainstNodeAllModes is TestMooncakeBenchAgainstNode in
// Mooncake's other connection modes and protocol versions.
func TestMooncakeBenchAgainstNodeAllModes(t *testing.T) {
	testbin.Long(t, "Mooncake's bench in three more modes")
	mooncakeBenchAgainstNode(t, poolModes[1:])
}

func mooncakeBenchAgainstNode(t *testing.T, modes []poolMode) {
	bin := mooncakeBin(t, "transfer_engine_bench")
	node := newNode(t)
	alloc(t, node, 64<<20)
	for _, m := range modes {
		for _, op := range []string{"write", "read"} {
			t.Run(m.name+"/"+op, func(t *testing.T) {
				out, code := mooncake(t, bin, m.env, mooncakeArgs(node.SessionID(), "--operation="+op,
					"--block_size=65536", "--batch_size=32", "--threads=2", "--duration=1")...)
				if code != 0 || !strings.Contains(out, "Test completed") {
					t.Fatalf("bench exited %d:\n%s", code, out)
				}
			})
		}
	}
}

var listening = regexp.MustCompile(`listening on ([0-9.]+:[0-9]+)`)

// mooncakeTarget starts transfer_engine_bench --mode=target and returns
// its session id once its buffer is published, and a function that kills
// it with SIGKILL.
func mooncakeTarget(t *testing.T, c *connector.Connector) (session string, kill func()) {
	t.Helper()
	session, kill, _ = mooncakeTargetProc(t, c)
	return session, kill
}

// mooncakeTargetProc is mooncakeTarget, with the target's process.
func mooncakeTargetProc(t *testing.T, c *connector.Connector) (session string, kill func(), proc *os.Process) {
	t.Helper()
	bin := mooncakeBin(t, "transfer_engine_bench")
	cmd := exec.Command(bin, "--mode=target", "--protocol=tcp", "--metadata_server=P2PHANDSHAKE",
		"--local_server_name=127.0.0.1:12345", "--buffer_size=268435456")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = cmd.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	kill = func() {
		once.Do(func() {
			cmd.Process.Kill()
			cmd.Wait()
		})
	}
	t.Cleanup(kill)
	found := make(chan string, 1)
	var logMu sync.Mutex
	var log bytes.Buffer
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			logMu.Lock()
			log.WriteString(sc.Text() + "\n")
			logMu.Unlock()
			if m := listening.FindStringSubmatch(sc.Text()); m != nil {
				found <- m[1]
			}
		}
	}()
	select {
	case session = <-found:
	case <-time.After(30 * time.Second):
		logMu.Lock()
		defer logMu.Unlock()
		t.Fatalf("the Mooncake target printed no session within 30 s:\n%s", log.String())
	}
	// Its buffer is registered a moment after it listens: until then it
	// publishes none.
	deadline := time.Now().Add(30 * time.Second)
	for {
		p, err := c.Open(context.Background(), session)
		if err == nil && len(p.Regions()) > 0 {
			return session, kill, cmd.Process
		}
		if err == nil {
			p.Close(context.Background())
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Mooncake target %s published no buffer within 30 s (last: %v)", session, err)
		}
		time.Sleep(50 * time.Millisecond) // polling a condition the target shows, not ordering events
	}
}

// TestNodeAgainstMooncakeTarget: a kvconnect node opens an unmodified
// Mooncake target by its session id, writes blocks into its buffer and
// reads them back, over protocol v2 (what it advertises) and v1.
func TestNodeAgainstMooncakeTarget(t *testing.T) {
	for _, v := range []struct {
		name string
		opts map[string]any
	}{{"v2", nil}, {"v1", map[string]any{"mooncake_proto": 1}}} {
		t.Run(v.name, func(t *testing.T) {
			ctx := context.Background()
			cfg := connector.Config{Protocol: "tcp", PluginDir: pluginDir(t)}
			if v.opts != nil {
				cfg.Transports = map[string]map[string]any{"tcp": v.opts}
			}
			c, err := connector.New(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			session, _ := mooncakeTarget(t, c)
			peer, err := c.Open(ctx, session)
			if err != nil {
				t.Fatal(err)
			}
			regions := peer.Regions()
			if len(regions) != 1 || regions[0].Len != 256<<20 || peer.Transport() != "tcp" {
				t.Fatalf("the Mooncake target's regions %+v over %s", regions, peer.Transport())
			}
			const n = 8 << 20
			src, back := alloc(t, c, n), alloc(t, c, n)
			for i := range src.Bytes() {
				src.Bytes()[i] = byte(i*31 + 7)
			}
			remote := regions[0].Addr + 12345 // unaligned, absolute like Mooncake's own
			if err := c.TransferSyncWrite(ctx, session, src.Addr(), remote, n); err != nil {
				t.Fatal(err)
			}
			if err := c.TransferSyncRead(ctx, session, back.Addr(), remote, n); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(back.Bytes(), src.Bytes()) {
				t.Fatal("the bytes read back from the Mooncake target differ from those written")
			}
			// A range past its buffer is refused before it is sent.
			err = c.TransferSyncWrite(ctx, session, src.Addr(), regions[0].Addr+regions[0].Len-10, 20)
			if !errors.Is(err, connector.ErrOutOfBounds) {
				t.Fatalf("WRITE past the Mooncake buffer: %v, want ErrOutOfBounds", err)
			}
		})
	}
}

// TestMooncakeTargetKilledMidTransfer: when the Mooncake peer dies, the
// node's ops to it fail within the timeout and nothing hangs.
func TestMooncakeTargetKilledMidTransfer(t *testing.T) {
	ctx := context.Background()
	cfg := connector.Config{Protocol: "tcp", PluginDir: pluginDir(t), TransferTimeout: 10 * time.Second,
		Transports: map[string]map[string]any{"tcp": {"op_timeout": "3s"}}}
	c, err := connector.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	session, kill := mooncakeTarget(t, c)
	peer, err := c.Open(ctx, session)
	if err != nil {
		t.Fatal(err)
	}
	rr := peer.Regions()[0]
	src := alloc(t, c, 1<<20)
	ops := make([]connector.Op, 1024) // 1 GiB, cycling through the target's buffer
	for i := range ops {
		ops[i] = connector.Op{Kind: connector.OpWrite, LocalRegion: src.ID(), RemoteRegion: rr.ID,
			RemoteOffset: uint64(i%256) << 20, Length: 1 << 20}
	}
	first, err := c.Submit(ctx, peer, ops[:16])
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Wait(ctx); err != nil {
		t.Fatalf("a batch before the kill: %v", err)
	}
	b, err := c.Submit(ctx, peer, ops)
	if err != nil {
		t.Fatal(err)
	}
	kill()
	killed := time.Now()
	select {
	case <-b.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("the batch still runs 20 s after its Mooncake peer was killed")
	}
	err = b.Err()
	t.Logf("batch ended %v after the kill: %v", time.Since(killed), err)
	if !errors.Is(err, connector.ErrPeerUnreachable) && !errors.Is(err, connector.ErrTimeout) {
		t.Fatalf("ops to a killed Mooncake peer: %v, want ErrPeerUnreachable or ErrTimeout", err)
	}
	// The next batch fails fast, and says why.
	start := time.Now()
	if err := c.Transfer(ctx, peer, ops[:1]...); err == nil {
		t.Fatal("a batch to a dead Mooncake peer succeeded")
	} else if time.Since(start) > 10*time.Second {
		t.Fatalf("a batch to a dead Mooncake peer took %v: %v", time.Since(start), err)
	}
}
