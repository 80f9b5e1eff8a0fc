package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kvconnect/kvconnect/connector"
)

// targetProcess is a kvconnect node in a process of its own (`kvconnect
// bench --mode target`), as deployed: the other end of the two-process
// variants.
type targetProcess struct {
	cmd     *exec.Cmd
	session string
	done    chan struct{}
	once    sync.Once
}

// startTargetProcess runs argv (`kvconnect bench --mode target ...`) with
// a buffer of bufSize bytes and waits for its session id.
func startTargetProcess(ctx context.Context, argv []string, bufSize int, inProcess bool) (*targetProcess, error) {
	args := append(append([]string(nil), argv[1:]...), "--buffer-size", strconv.Itoa(bufSize), "--json")
	if inProcess {
		args = append(args, "--in-process")
	}
	cmd := exec.Command(argv[0], args...)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = childAttr(true)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the target process: %w", err)
	}
	t := &targetProcess{cmd: cmd, done: make(chan struct{})}
	go func() { cmd.Wait(); close(t.done) }()
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var r targetReadyLine
			if json.Unmarshal(sc.Bytes(), &r) == nil && r.Event == "ready" {
				ready <- r.Session
			}
		}
	}()
	select {
	case t.session = <-ready:
		return t, nil
	case <-t.done:
		return nil, fmt.Errorf("the target process exited before it served (%v)", cmd.ProcessState)
	case <-ctx.Done():
	case <-time.After(time.Minute):
	}
	t.stop()
	return nil, fmt.Errorf("the target process did not serve within a minute")
}

// targetReadyLine is the part of --mode target --json's ready line read.
type targetReadyLine struct {
	Event   string `json:"event"`
	Session string `json:"session"`
}

// pids are the target process and its children (its plugins).
func (t *targetProcess) pids() []int {
	pids := []int{t.cmd.Process.Pid}
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", t.cmd.Process.Pid))
	for _, task := range tasks {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", t.cmd.Process.Pid, task.Name()))
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// stop ends the target (SIGINT, then SIGKILL to its group after 10 s).
func (t *targetProcess) stop() error {
	t.once.Do(func() {
		t.cmd.Process.Signal(os.Interrupt)
		select {
		case <-t.done:
		case <-time.After(10 * time.Second):
			syscall.Kill(-t.cmd.Process.Pid, syscall.SIGKILL)
			<-t.done
		}
	})
	return nil
}

// twoProcessBencher runs workloads from a node in this process against
// a target process.
type twoProcessBencher struct {
	node   *Node
	peer   *connector.Peer
	target *targetProcess
}

func (b twoProcessBencher) run(ctx context.Context, w Workload, p *Progress, label string) (Result, error) {
	pids := append(b.node.PluginPIDs(), b.target.pids()...)
	r, _, err := Run(ctx, RunInput{Initiator: b.node, Peer: b.peer, Workload: w, PIDs: pids, Progress: p, Label: label})
	return r, err
}

func (b twoProcessBencher) close() error {
	err := b.node.Close()
	b.target.stop()
	return err
}

// startTwoProcess starts a target process and an initiator node here,
// both with the tcp transport in-process or both as plugins, on loopback.
func (o *SuiteOptions) startTwoProcess(ctx context.Context, cfg connector.Config, inProcess bool, opts []connector.Option) (bencher, error) {
	t, err := startTargetProcess(ctx, o.TargetServer, o.BufferSize, inProcess)
	if err != nil {
		return nil, err
	}
	cfg = initiatorConfig(cfg)
	if cfg.Hostname == "" {
		cfg.Hostname = "127.0.0.1"
	}
	if inProcess {
		opts = append(opts, InProcessTCP())
	}
	node, peer, err := startNodeOpen(ctx, cfg, o.BufferSize, t.session, t.stop, opts...)
	if err != nil {
		return nil, err
	}
	return twoProcessBencher{node: node, peer: peer, target: t}, nil
}

// floorBencher measures the C ping-pong (floor/pingpong.c) between two
// processes: one small op's floor on this machine. It measures only the
// single-op latency workload.
type floorBencher struct{ bin string }

func startFloor(bin string) (bencher, error) {
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("%s not built (make bench builds it with gcc from cmd/kvconnect/internal/bench/floor/pingpong.c)", bin)
	}
	return &floorBencher{bin: bin}, nil
}

func (b *floorBencher) run(ctx context.Context, w Workload, p *Progress, label string) (Result, error) {
	if w.BatchSize != 1 || w.Threads != 1 {
		return Result{}, fmt.Errorf("the C floor measures one op per batch on one thread only")
	}
	srv := exec.CommandContext(ctx, b.bin, "server")
	out, err := srv.StdoutPipe()
	if err != nil {
		return Result{}, err
	}
	if err := srv.Start(); err != nil {
		return Result{}, err
	}
	defer func() { srv.Process.Kill(); srv.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	port, perr := strconv.Atoi(strings.TrimPrefix(strings.TrimSpace(line), "port="))
	if err != nil || perr != nil {
		return Result{}, fmt.Errorf("the C ping-pong server printed %q: %v", line, err)
	}
	p.Set("%s", label)
	cli := exec.CommandContext(ctx, b.bin, "client", strconv.Itoa(port), strconv.Itoa(w.BlockSize),
		strconv.FormatFloat(w.Duration.Seconds(), 'f', 3, 64), strconv.FormatFloat(w.Warmup.Seconds(), 'f', 3, 64))
	res, err := cli.Output()
	if err != nil {
		return Result{}, fmt.Errorf("the C ping-pong client: %v", err)
	}
	var r struct {
		Ops     int     `json:"ops"`
		Seconds float64 `json:"seconds"`
		P50     float64 `json:"p50_us"`
		P99     float64 `json:"p99_us"`
	}
	if err := json.Unmarshal(res, &r); err != nil {
		return Result{}, fmt.Errorf("the C ping-pong client printed %q: %v", res, err)
	}
	return Result{Transport: "raw", Mode: "C, 2 processes", Operation: string(w.Op), BlockSize: w.BlockSize, BatchSize: 1, Threads: 1,
		Seconds: r.Seconds, Ops: uint64(r.Ops), Batches: uint64(r.Ops), Bytes: uint64(r.Ops) * uint64(w.BlockSize), Unit: Unit,
		GBps: float64(r.Ops) * float64(w.BlockSize) / r.Seconds / 1e9, OpsPerSec: float64(r.Ops) / r.Seconds,
		LatencyP50: r.P50, LatencyP99: r.P99}, nil
}

func (b *floorBencher) close() error { return nil }
