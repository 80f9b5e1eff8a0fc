package bench

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/kvconnect/kvconnect/connector"
	"github.com/kvconnect/kvconnect/transports/tcp"
)

// Mooncake's own transfer_engine_bench, run unmodified as a variant of the
// suite: as initiator against a Mooncake target or a kvconnect node, and
// as the target of a kvconnect initiator.

// mooncakeBench is transfer_engine_bench in dir.
func mooncakeBench(dir string) string { return filepath.Join(dir, "transfer_engine_bench") }

// mooncakeTarget is a running transfer_engine_bench --mode=target.
type mooncakeTarget struct {
	cmd     *exec.Cmd
	session string
	log     *lockedBuffer
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

var mooncakeListening = regexp.MustCompile(`listening on ([0-9.]+:[0-9]+)`)

// startMooncakeTarget starts a Mooncake target with bufSize of memory and
// returns once it publishes its buffer.
func startMooncakeTarget(ctx context.Context, dir string, bufSize int) (*mooncakeTarget, error) {
	cmd := exec.Command(mooncakeBench(dir), "--mode=target", "--protocol=tcp", "--metadata_server=P2PHANDSHAKE",
		"--local_server_name=127.0.0.1:12345", "--buffer_size="+strconv.Itoa(bufSize))
	cmd.SysProcAttr = childAttr(false)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the Mooncake target: %w", err)
	}
	t := &mooncakeTarget{cmd: cmd, log: &lockedBuffer{}}
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			t.log.Write([]byte(sc.Text() + "\n"))
			if m := mooncakeListening.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case found <- m[1]:
				default:
				}
			}
		}
	}()
	select {
	case t.session = <-found:
	case <-time.After(30 * time.Second):
		t.stop()
		return nil, fmt.Errorf("the Mooncake target printed no session within 30 s:\n%s", t.log.String())
	case <-ctx.Done():
		t.stop()
		return nil, ctx.Err()
	}
	// It registers its buffer a moment after it listens.
	deadline := time.Now().Add(30 * time.Second)
	for !mooncakeHasBuffer(t.session) {
		if time.Now().After(deadline) {
			t.stop()
			return nil, fmt.Errorf("the Mooncake target %s published no buffer within 30 s", t.session)
		}
		time.Sleep(20 * time.Millisecond) // polling a condition the target shows
	}
	return t, nil
}

func (t *mooncakeTarget) pid() int { return t.cmd.Process.Pid }

func (t *mooncakeTarget) stop() error {
	t.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { t.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.cmd.Process.Kill()
		<-done
	}
	return nil
}

// mooncakeHasBuffer asks a session's handshake, as Mooncake's client does,
// whether its descriptor lists a buffer.
func mooncakeHasBuffer(session string) bool {
	nc, err := net.DialTimeout("tcp", session, time.Second)
	if err != nil {
		return false
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(5 * time.Second))
	req := append(binary.LittleEndian.AppendUint64(nil, 3), 1, '{', '}')
	if _, err := nc.Write(req); err != nil {
		return false
	}
	var hdr [9]byte
	if _, err := io.ReadFull(nc, hdr[:]); err != nil || hdr[8] != 1 {
		return false
	}
	n := binary.LittleEndian.Uint64(hdr[:8])
	if n == 0 || n > 64<<20 {
		return false
	}
	body := make([]byte, n-1)
	if _, err := io.ReadFull(nc, body); err != nil {
		return false
	}
	var d struct{ Buffers []json.RawMessage }
	return json.Unmarshal(body, &d) == nil && len(d.Buffers) > 0
}

// mooncakeInitiator runs transfer_engine_bench --mode=initiator against a
// session, one process per measurement.
type mooncakeInitiator struct {
	dir     string
	env     []string // MC_TCP_ENABLE_CONNECTION_POOL=1 for the pooled variants
	session string
	bufSize int
	// targetPIDs are the processes serving the target (for CPU), and
	// stop ends the target when the variant ends.
	targetPIDs func() []int
	stop       func() error
	// secs is how long each workload's runs last, once a run counted
	// fewer than minBatches (mooncakeMinBatches when 0) batches; runs
	// last at least minSecs (the workload's duration when 0) and at most
	// maxSecs (mooncakeMaxSecs when 0).
	secs                         map[Workload]int
	minBatches, minSecs, maxSecs int
}

// Mooncake's bench counts whole batches over whole seconds: at 1 MiB
// blocks (a few batches of 128 a second on two vCPUs) a 1 s run's count
// is off by up to a sixth, and a ratio of two such runs is noise. A run
// that counted fewer than mooncakeMinBatches is measured again, long
// enough for that many (the short one served as its warmup), at most
// mooncakeMaxSecs, and later runs of that workload last as long.
//
// Each run is a new initiator process whose buffer is touched for the
// first time during the run: at 1 MiB its batches cover all 512 MiB of
// it, and on the AMD EPYC VM each thread's first batch took about 5 s
// against 0.6 s for the next (docs/DATAPATH-ROUNDS.md, eighteenth round). The
// short run's rate is then the first pass's, so the longer run lasts
// mooncakeMaxSecs, of which 20 s leaves the steady state about three
// quarters (8 s left it about half). Workloads whose batches touch
// little memory count enough batches in their first second and are not
// stretched.
//
// The suite's runs last at least mooncakeMinSecs. Mooncake's initiator
// waits for its ops by polling in every worker thread (docs/DATAPATH-ROUNDS.md,
// sixteenth round), so on a machine with fewer cores than its threads
// plus the target's, a run measures how the scheduler shared the cores
// while it lasted: pooled 16 KiB WRITE runs of 1 s against one target
// moved 0.05 to 0.28 GB/s. Against the same two targets, 3 s runs put
// fewer of their same-pair ratios far from the middle (twenty-first
// round). Both targets of a row get the same duration.
const (
	mooncakeMinBatches = 24
	mooncakeMinSecs    = 3
	mooncakeMaxSecs    = 20
)

var mooncakeCompleted = regexp.MustCompile(`Test completed: duration ([0-9.]+), batch count ([0-9]+), throughput ([0-9.]+)`)

func (m *mooncakeInitiator) run(ctx context.Context, w Workload, p *Progress, label string) (Result, error) {
	minBatches, maxSecs := cmp.Or(m.minBatches, mooncakeMinBatches), cmp.Or(m.maxSecs, mooncakeMaxSecs)
	secs := max(int(math.Ceil(w.Duration.Seconds())), m.minSecs, m.secs[w])
	r, err := m.runFor(ctx, w, secs, p, label)
	if err != nil || r.Batches >= uint64(minBatches) || r.Batches == 0 || r.Seconds <= 0 || secs >= maxSecs {
		return r, err
	}
	rate := float64(r.Batches) / r.Seconds
	long := min(maxSecs, int(math.Ceil(float64(minBatches)/rate)))
	if long <= secs {
		return r, nil
	}
	if m.secs == nil {
		m.secs = map[Workload]int{}
	}
	m.secs[w] = long
	return m.runFor(ctx, w, long, p, label)
}

// runFor runs Mooncake's initiator on w for secs seconds.
func (m *mooncakeInitiator) runFor(ctx context.Context, w Workload, secs int, p *Progress, label string) (Result, error) {
	args := []string{"--mode=initiator", "--protocol=tcp", "--metadata_server=P2PHANDSHAKE",
		"--local_server_name=127.0.0.1:12346", "--segment_id=" + m.session, "--operation=" + string(w.Op),
		"--block_size=" + strconv.Itoa(w.BlockSize), "--batch_size=" + strconv.Itoa(w.BatchSize),
		"--threads=" + strconv.Itoa(w.Threads), "--duration=" + strconv.Itoa(secs),
		"--buffer_size=" + strconv.Itoa(max(m.bufSize, w.BlockSize*w.BatchSize*w.Threads)), "--report_unit=GB"}
	rctx, cancel := context.WithTimeout(ctx, time.Duration(secs+60)*time.Second)
	defer cancel()
	cmd := exec.CommandContext(rctx, mooncakeBench(m.dir), args...)
	cmd.Env = append(os.Environ(), m.env...)
	var pids []int
	if m.targetPIDs != nil {
		pids = m.targetPIDs()
	}
	before, err := snapshotCPU(pids)
	if err != nil {
		return Result{}, err
	}
	p.Set("%srunning Mooncake's transfer_engine_bench for %ds", label, secs)
	out, err := cmd.CombinedOutput()
	p.Clear()
	after, _ := snapshotCPU(pids)
	timeWait := countTimeWait()
	mm := mooncakeCompleted.FindSubmatch(out)
	if err != nil || mm == nil {
		var ee *exec.ExitError
		if bytes.Contains(out, []byte("Cannot assign requested address")) || bytes.Contains(out, []byte("EADDRNOTAVAIL")) {
			return Result{}, fmt.Errorf("transfer_engine_bench ran out of ephemeral ports (connect: Cannot assign requested address): %d sockets in TIME-WAIT; its default opens a TCP connection per request, and Linux reuses TIME-WAIT ports for new connections only on loopback (net.ipv4.tcp_tw_reuse=2): exit %v", timeWait, err)
		}
		if errors.As(err, &ee) || err == nil {
			return Result{}, fmt.Errorf("transfer_engine_bench exited %v: %s", err, lastLine(out))
		}
		return Result{}, err
	}
	dur, _ := strconv.ParseFloat(string(mm[1]), 64)
	batches, _ := strconv.ParseUint(string(mm[2]), 10, 64)
	ops := batches * uint64(w.BatchSize)
	r := Result{Transport: tcp.Name, Mode: "Mooncake TE", Peer: m.session, Bytes: ops * uint64(w.BlockSize), Ops: ops, Batches: batches, PluginPIDs: pids, TimeWait: timeWait}
	if ps := cmd.ProcessState; ps != nil {
		r.HostCPU = (ps.UserTime() + ps.SystemTime()).Seconds()
		if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
			r.HostSwitches = ru.Nvcsw + ru.Nivcsw
		}
	}
	_, r.PluginCPU = after.since(before)
	_, r.PluginSwitches = after.switchesSince(before)
	_, pw, idle := after.waitSince(before)
	r.PluginRunDelay, r.VCPUIdle = pw.Seconds(), idle
	r.fill(w, time.Duration(dur*float64(time.Second)), nil)
	// Mooncake reports no latency distribution: with one batch in flight
	// per thread, the mean batch time stands for p50.
	if batches > 0 {
		mean := dur * 1e6 * float64(w.Threads) / float64(batches)
		r.LatencyP50, r.LatencyP99, r.LatencyMax, r.LatencyIsMean = mean, mean, mean, true
	}
	return r, nil
}

func (m *mooncakeInitiator) close() error {
	if m.stop != nil {
		return m.stop()
	}
	return nil
}

func lastLine(b []byte) string {
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	if len(lines) == 0 {
		return ""
	}
	return string(lines[len(lines)-1])
}

// nodeBencher is a kvconnect initiator node against a peer (a Mooncake
// target).
type nodeBencher struct {
	node *Node
	peer *connector.Peer
	stop func() error
}

func (b nodeBencher) run(ctx context.Context, w Workload, p *Progress, label string) (Result, error) {
	r, _, err := Run(ctx, RunInput{Initiator: b.node, Peer: b.peer, Workload: w, PIDs: b.node.PluginPIDs(), Progress: p, Label: label})
	return r, err
}

func (b nodeBencher) close() error {
	err := b.node.Close()
	if b.stop != nil {
		b.stop()
	}
	return err
}

// countTimeWait counts this host's TCP sockets in TIME-WAIT (state 06 in
// /proc/net/tcp and tcp6): what a connection-per-request client leaves
// behind, and what exhausts ephemeral ports.
func countTimeWait() int {
	n := 0
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range bytes.Split(b, []byte("\n"))[1:] {
			if fs := bytes.Fields(line); len(fs) > 3 && string(fs[3]) == "06" {
				n++
			}
		}
	}
	return n
}
