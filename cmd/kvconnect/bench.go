package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"runtime/trace"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/kvconnect/kvconnect/cmd/kvconnect/internal/bench"
	"github.com/kvconnect/kvconnect/connector"
	"github.com/kvconnect/kvconnect/units"
)

func init() { subcommands = append(subcommands, newBenchCommand) }

type benchFlags struct {
	mode, segment, operation, blockSize, bufferSize, duration, warmup string
	batch, threads, rounds, corrupt                                   int
	seed                                                              uint64
	asJSON, verify, inProcess, suite, rawServer                       bool
	out, cpuProfile, traceFile, mooncakeBin, floorBin                 string
}

func newBenchCommand() *cobra.Command {
	var f benchFlags
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure transfer throughput, latency and CPU, like Mooncake's transfer_engine_bench",
		Long: `bench measures kvconnect's data path the way Mooncake's transfer_engine_bench
does: --threads goroutines each submit batches of --batch-size READ or WRITE
ops of --block-size bytes against a peer's buffer for --duration, cycling
through the buffer. It reports throughput in GB/s (1 GB = 1e9 B), ops/s,
batch latency p50/p99, and the CPU seconds used by this process and by the
transport plugin processes.

Modes:
  --mode target      start a node with --buffer-size of memory, print its
                     session id ("session=host:port") and serve until Ctrl-C
  --mode initiator   run against --segment-id host:port: a kvconnect node or
                     an unmodified Mooncake Transfer Engine (TCP)
  --mode loopback    both nodes in this process, two connectors (each
                     transport still its own plugin process unless
                     --in-process); the default
  --suite            the benchmark suite (make bench): a raw Go TCP
                     baseline, tcp as a plugin, tcp in-process and every
                     other transport built here, alternating round by round;
                     prints a markdown table (--out writes it to a file)

--verify checks the data with nothing but ops of the initiator, so it
works against any target (a kvconnect node or an unmodified Mooncake
one): a WRITE run writes a pattern derived from --seed, then the initiator
reads every block the run wrote back and compares; before a READ run the
initiator writes a (different) pattern over the blocks the run reads, and
afterwards compares what it read. It prints "verified N/N blocks".

The transport, plugin directory and transport options come from the usual
config flags, file and environment (--protocol, --plugin-dir, --set
transports.tcp.connections=8, ...). Flags may also be written Mooncake's
way, with underscores (--block_size). With --suite, --duration, --warmup,
--buffer-size, --block-size and --operation have suite defaults (1s, 200ms,
threads x batch x the largest block, 16KiB,64KiB,1MiB, write,read) and the last
two take comma-separated lists.
A live progress line goes to a terminal's stderr; nothing when piped.`,
		Example: `  kvconnect bench --operation write --block-size 1MiB --duration 5s
  kvconnect bench --mode target --rpc-port 15001 --buffer-size 1GiB
  kvconnect bench --mode initiator --segment-id 10.0.0.2:15001 --operation write --verify --json
  kvconnect bench --suite --rounds 5 --out docs/PERFORMANCE.md`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runBench(cmd, &f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.mode, "mode", "loopback", "target, initiator or loopback")
	fl.StringVar(&f.segment, "segment-id", "", "the target's session id host:port (--mode initiator)")
	fl.StringVar(&f.operation, "operation", "read", "read or write")
	fl.StringVar(&f.blockSize, "block-size", "64KiB", "bytes per op")
	fl.IntVar(&f.batch, "batch-size", 128, "ops per batch")
	fl.IntVar(&f.threads, "threads", 4, "threads, each with one batch in flight")
	fl.StringVar(&f.duration, "duration", "10s", "how long to run, e.g. 10s or 10 (seconds); with --suite, each measurement")
	fl.StringVar(&f.warmup, "warmup", "0s", "unmeasured run before the measurement")
	fl.StringVar(&f.bufferSize, "buffer-size", "256MiB", "memory each node registers")
	fl.BoolVar(&f.asJSON, "json", false, "print JSON for machines instead of text")
	fl.BoolVar(&f.verify, "verify", false, "check the data moved (see above)")
	fl.Uint64Var(&f.seed, "seed", 1, "seed of the verification pattern")
	fl.BoolVar(&f.inProcess, "in-process", false, "run the tcp transport inside this process instead of as a plugin")
	fl.StringVar(&f.floorBin, "floor-bin", "", "with --suite: the C ping-pong (cmd/kvconnect/internal/bench/floor/pingpong.c, built by make bench) measuring a small op's floor between two processes (default: kvconnect-pingpong beside this binary)")
	fl.BoolVar(&f.suite, "suite", false, "run the benchmark suite (see above)")
	fl.IntVar(&f.rounds, "rounds", 5, "suite rounds")
	fl.StringVar(&f.out, "out", "", "with --suite: also write the report (with the machine description and commands) to this markdown file")
	fl.StringVar(&f.mooncakeBin, "mooncake-bin", "", "with --suite: directory holding Mooncake's transfer_engine_bench, run as a variant beside kvconnect (default $KVCONNECT_MOONCAKE_BIN)")
	fl.StringVar(&f.cpuProfile, "cpuprofile", "", "write a pprof CPU profile of this process during the run to this file (with --in-process it covers the transport too)")
	fl.StringVar(&f.traceFile, "trace", "", "write a Go execution trace of this process during the run to this file (go tool trace; with --in-process it covers the transport too)")
	fl.IntVar(&f.corrupt, "verify-corrupt-block", -1, "test hook: damage this block of the target's buffer before verifying")
	fl.MarkHidden("verify-corrupt-block")
	fl.BoolVar(&f.rawServer, "raw-server", false, "the suite's raw baseline server process: serve until stdin ends")
	fl.MarkHidden("raw-server")
	// Mooncake's transfer_engine_bench spells flags with underscores.
	fl.SetNormalizeFunc(func(_ *pflag.FlagSet, name string) pflag.NormalizedName {
		return pflag.NormalizedName(strings.ReplaceAll(name, "_", "-"))
	})
	return cmd
}

// benchLogger quiets the nodes' routine info lines (node up, closed) so
// they do not interleave with the report, unless debug logging was asked.
func benchLogger(log *zap.Logger) *zap.Logger {
	if log.Core().Enabled(zapcore.DebugLevel) || !log.Core().Enabled(zapcore.InfoLevel) {
		return log // debug asked for, or quieter than warn already
	}
	return log.WithOptions(zap.IncreaseLevel(zapcore.WarnLevel))
}

func runBench(cmd *cobra.Command, f *benchFlags) error {
	changed := func(name string) bool { return cmd.Flags().Changed(name) }
	if f.rawServer {
		n, err := parseSizeFlag("buffer-size", f.bufferSize)
		if err != nil {
			return err
		}
		return bench.ServeRawProcess(cmd.InOrStdin(), cmd.OutOrStdout(), int(n))
	}
	if f.suite {
		for _, name := range []string{"segment-id", "verify", "in-process", "mode", "cpuprofile", "trace"} {
			if changed(name) {
				return fmt.Errorf("--%s: not used with --suite (the suite runs every variant in loopback, without verification or profiles)", name)
			}
		}
		return runSuite(cmd, f)
	}
	for _, name := range []string{"rounds", "out", "mooncake-bin", "floor-bin"} {
		if changed(name) {
			return fmt.Errorf("--%s: only with --suite", name)
		}
	}
	if f.mode == "target" {
		// A target serves what initiators ask: nothing of a workload of
		// its own, nor a profile of one, applies.
		for _, name := range []string{"operation", "block-size", "batch-size", "threads", "duration", "warmup", "verify", "cpuprofile", "trace"} {
			if changed(name) {
				return fmt.Errorf("--%s: not used with --mode target (the initiator runs the workload; give it there)", name)
			}
		}
	}
	switch f.mode {
	case "target", "loopback":
		if f.segment != "" {
			return fmt.Errorf("--segment-id %q: only with --mode initiator (--mode is %s)", f.segment, f.mode)
		}
	case "initiator":
		if f.segment == "" {
			return errors.New("--mode initiator needs --segment-id host:port, the session id the target printed")
		}
	default:
		return fmt.Errorf("--mode %q: must be target, initiator or loopback", f.mode)
	}
	w, bufSize, err := parseWorkload(f)
	if err != nil {
		return err
	}
	loaded, log, err := loadConfig(cmd)
	if err != nil {
		return err
	}
	defer log.Sync()
	cfg := loaded.Config
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	opts := []connector.Option{connector.WithLogger(benchLogger(log))}
	if f.inProcess {
		opts = append(opts, bench.InProcessTCP())
	}
	out := cmd.OutOrStdout()
	switch f.mode {
	case "target":
		return runTarget(ctx, out, f, cfg, bufSize, opts)
	case "initiator":
		node, err := bench.StartNode(ctx, cfg, bufSize, opts...)
		if err != nil {
			return err
		}
		defer node.Close()
		peer, err := node.C.Open(ctx, f.segment)
		if err != nil {
			return fmt.Errorf("--segment-id %s: %w", f.segment, err)
		}
		return runAndReport(ctx, cmd, f, w, node, peer, node.PluginPIDs())
	}
	// loopback
	pair, err := bench.StartPair(ctx, cfg, bufSize, opts...)
	if err != nil {
		return err
	}
	defer pair.Close()
	return runAndReport(ctx, cmd, f, w, pair.Initiator, pair.Peer, pair.PluginPIDs())
}

func parseWorkload(f *benchFlags) (bench.Workload, int, error) {
	op, err := bench.ParseOperation(f.operation)
	if err != nil {
		return bench.Workload{}, 0, err
	}
	bs, err := parseSizeFlag("block-size", f.blockSize)
	if err != nil {
		return bench.Workload{}, 0, err
	}
	buf, err := parseSizeFlag("buffer-size", f.bufferSize)
	if err != nil {
		return bench.Workload{}, 0, err
	}
	if buf > connector.MaxRegionSize {
		return bench.Workload{}, 0, fmt.Errorf("--buffer-size %s: at most %s", f.bufferSize, units.FormatSize(connector.MaxRegionSize))
	}
	if bs > buf {
		return bench.Workload{}, 0, fmt.Errorf("--block-size %s is larger than --buffer-size %s", f.blockSize, f.bufferSize)
	}
	d, err := parseDurationFlag("duration", f.duration)
	if err != nil {
		return bench.Workload{}, 0, err
	}
	warm, err := parseDurationFlag("warmup", f.warmup)
	if err != nil {
		return bench.Workload{}, 0, err
	}
	w := bench.Workload{Op: op, BlockSize: int(bs), BatchSize: f.batch, Threads: f.threads, Duration: d, Warmup: warm}
	if err := w.Validate(); err != nil {
		return bench.Workload{}, 0, err
	}
	return w, int(buf), nil
}

func parseSizeFlag(name, v string) (uint64, error) {
	n, err := units.ParseSize(v)
	if err != nil {
		return 0, fmt.Errorf("--%s %q: %v", name, v, err)
	}
	if n == 0 {
		return 0, fmt.Errorf("--%s %q: must be at least 1 byte; write a size like 64KiB", name, v)
	}
	return n, nil
}

func parseDurationFlag(name, v string) (time.Duration, error) {
	d, err := units.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("--%s %q: %v", name, v, err)
	}
	return d, nil
}

// targetReady is what --mode target prints with --json once it serves.
type targetReady struct {
	Event      string `json:"event"` // "ready"
	Session    string `json:"session"`
	Transport  string `json:"transport"`
	Mode       string `json:"mode"`
	BufferSize int    `json:"buffer_size"`
	BufferAddr uint64 `json:"buffer_addr"`
	PluginPIDs []int  `json:"plugin_pids,omitempty"`
	// MetricsAddress is the node's metrics endpoint (metrics_address).
	MetricsAddress string `json:"metrics_address,omitempty"`
}

func runTarget(ctx context.Context, out io.Writer, f *benchFlags, cfg connector.Config, bufSize int, opts []connector.Option) error {
	node, err := bench.StartNode(ctx, cfg, bufSize, opts...)
	if err != nil {
		return err
	}
	defer node.Close()
	st := node.C.Status()
	if f.asJSON {
		if err := json.NewEncoder(out).Encode(targetReady{Event: "ready", Session: node.C.SessionID(), Transport: st.Transport, Mode: st.Mode,
			BufferSize: node.Buf.Len(), BufferAddr: node.Buf.Addr(), PluginPIDs: node.PluginPIDs(), MetricsAddress: st.MetricsAddress}); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(out, "session=%s\n", node.C.SessionID())
		fmt.Fprintf(out, "transport=%s mode=%s buffer=%s; serving until interrupted (Ctrl-C)\n",
			st.Transport, st.Mode, units.FormatSize(uint64(node.Buf.Len())))
		if st.MetricsAddress != "" {
			fmt.Fprintf(out, "metrics_address=%s\n", st.MetricsAddress)
		}
	}
	<-ctx.Done()
	return nil
}

func runAndReport(ctx context.Context, cmd *cobra.Command, f *benchFlags, w bench.Workload, node *bench.Node, peer *connector.Peer, pids []int) error {
	label := fmt.Sprintf("%s -> %s: ", w, peer.Session())
	verifier := &bench.Verifier{Initiator: node, Peer: peer, Op: w.Op, Seed: f.seed, BlockSize: w.BlockSize, CorruptBlock: f.corrupt}
	if f.verify {
		if err := verifier.Prepare(ctx); err != nil {
			return err
		}
	}
	if f.cpuProfile != "" {
		pf, err := os.Create(f.cpuProfile)
		if err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		defer pf.Close()
		if err := pprof.StartCPUProfile(pf); err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
	}
	if f.traceFile != "" {
		tf, err := os.Create(f.traceFile)
		if err != nil {
			return fmt.Errorf("--trace: %w", err)
		}
		defer tf.Close()
		if err := trace.Start(tf); err != nil {
			return fmt.Errorf("--trace: %w", err)
		}
	}
	res, blocks, err := bench.Run(ctx, bench.RunInput{Initiator: node, Peer: peer, Workload: w, PIDs: pids,
		Progress: bench.NewProgress(cmd.ErrOrStderr()), Label: label})
	if f.cpuProfile != "" {
		pprof.StopCPUProfile()
	}
	if f.traceFile != "" {
		trace.Stop()
	}
	if err != nil {
		return err
	}
	if f.verify {
		v, err := verifier.Check(ctx, blocks)
		if err != nil {
			return err
		}
		res.Verify = &v
	}
	if res.Metrics, err = bench.ReadNodeMetrics(ctx, node.C); err != nil {
		return fmt.Errorf("reading this node's metrics (metrics_address): %w", err)
	}
	out := cmd.OutOrStdout()
	if f.asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			return err
		}
	} else {
		writeRunText(out, w, res)
	}
	if v := res.Verify; v != nil && !v.OK {
		return fmt.Errorf("--verify: %s", describeVerify(*v))
	}
	return nil
}

func describeVerify(v bench.VerifyResult) string {
	switch {
	case v.Error != "":
		return fmt.Sprintf("%s could not verify: %s", v.By, v.Error)
	case v.Mismatched > 0:
		return fmt.Sprintf("verified %d/%d blocks: %d differ from the pattern written, first %v (%s checked blocks %s of %s)",
			v.Checked-v.Mismatched, v.Checked, v.Mismatched, v.FirstBad, v.By, v.Blocks, units.FormatSize(uint64(v.BlockSize)))
	}
	return fmt.Sprintf("verified %d/%d blocks: all match (%s checked blocks %s of %s, every block the run moved)",
		v.Checked, v.Checked, v.By, v.Blocks, units.FormatSize(uint64(v.BlockSize)))
}

func writeRunText(out io.Writer, w bench.Workload, r bench.Result) {
	ms := func(us float64) string {
		if us >= 1000 {
			return fmt.Sprintf("%.2f ms", us/1000)
		}
		return fmt.Sprintf("%.0f µs", us)
	}
	fmt.Fprintf(out, "kvconnect bench: %s for %v, transport %s (%s) to %s\n", w, w.Duration, r.Transport, r.Mode, r.Peer)
	fmt.Fprintf(out, "  throughput     %.3f %s = %.3f GiB/s\n", r.GBps, bench.Unit, r.GBps*1e9/(1<<30))
	fmt.Fprintf(out, "  ops            %.0f ops/s (%d ops in %d batches, %.3f GB in %.2f s)\n", r.OpsPerSec, r.Ops, r.Batches, float64(r.Bytes)/1e9, r.Seconds)
	fmt.Fprintf(out, "  batch latency  p50 %s, p99 %s, max %s\n", ms(r.LatencyP50), ms(r.LatencyP99), ms(r.LatencyMax))
	pids := "no plugin process (in-process)"
	if len(r.PluginPIDs) > 0 {
		pids = fmt.Sprintf("plugins %.2f s (pids %s)", r.PluginCPU, strings.Trim(fmt.Sprint(r.PluginPIDs), "[]"))
	}
	fmt.Fprintf(out, "  CPU            host %.2f s, %s, over %.2f s wall\n", r.HostCPU, pids, r.Seconds)
	if r.Batches > 0 {
		sw := fmt.Sprintf("host %.1f", float64(r.HostSwitches)/float64(r.Batches))
		if len(r.PluginPIDs) > 0 {
			sw += fmt.Sprintf(", plugins %.1f", float64(r.PluginSwitches)/float64(r.Batches))
		}
		fmt.Fprintf(out, "  switches       %s context switches per batch (every thread, voluntary and involuntary)\n", sw)
		wait := fmt.Sprintf("host %.0f µs", r.HostRunDelay*1e6/float64(r.Batches))
		if len(r.PluginPIDs) > 0 {
			wait += fmt.Sprintf(", plugins %.0f µs", r.PluginRunDelay*1e6/float64(r.Batches))
		}
		fmt.Fprintf(out, "  waiting        %s per batch runnable but not running; vCPUs idle %.0f %% of the time\n", wait, 100*r.VCPUIdle)
	}
	if g := r.Ring; g != nil {
		way := "sleeping"
		if g.Spinning {
			way = "spinning"
		}
		fmt.Fprintf(out, "  ring           %d batches; the host's waits: %d caught spinning, %d slept; %s at the end\n", g.Batches, g.CaughtSpinning, g.Slept, way)
		if pg := g.Plugin; pg != nil {
			fmt.Fprintf(out, "                 the plugin took %d by its spinner, %d by its sleeper, %d by its standby\n", pg.ClaimedBySpinner, pg.ClaimedBySleeper, pg.ClaimedByStandby)
		}
	}
	if r.Verify != nil {
		fmt.Fprintf(out, "  verify         %s\n", describeVerify(*r.Verify))
	}
	if r.Metrics != nil {
		fmt.Fprintf(out, "  metrics        %s\n", r.Metrics.Summary())
	}
}

func runSuite(cmd *cobra.Command, f *benchFlags) error {
	so := bench.DefaultSuiteOptions()
	changed := func(name string) bool { return cmd.Flags().Changed(name) }
	var err error
	if changed("block-size") {
		so.BlockSizes = nil
		for _, s := range strings.Split(f.blockSize, ",") {
			n, err := parseSizeFlag("block-size", s)
			if err != nil {
				return err
			}
			so.BlockSizes = append(so.BlockSizes, int(n))
		}
	}
	if changed("operation") {
		so.Ops = nil
		for _, s := range strings.Split(f.operation, ",") {
			op, err := bench.ParseOperation(s)
			if err != nil {
				return err
			}
			so.Ops = append(so.Ops, op)
		}
	}
	if changed("buffer-size") {
		n, err := parseSizeFlag("buffer-size", f.bufferSize)
		if err != nil {
			return err
		}
		if n > connector.MaxRegionSize {
			return fmt.Errorf("--buffer-size %s: at most %s", f.bufferSize, units.FormatSize(connector.MaxRegionSize))
		}
		so.BufferSize = int(n)
	}
	if changed("duration") {
		if so.Duration, err = parseDurationFlag("duration", f.duration); err != nil {
			return err
		}
	}
	if changed("warmup") {
		if so.Warmup, err = parseDurationFlag("warmup", f.warmup); err != nil {
			return err
		}
	}
	if changed("threads") {
		so.Threads = f.threads
	}
	if changed("batch-size") {
		so.BatchSize = f.batch
	}
	// The suite's defaults fill in zeros: a zero given on the command line
	// is refused here, as outside the suite, not replaced.
	switch {
	case changed("threads") && (f.threads < 1 || f.threads > bench.MaxThreads):
		return fmt.Errorf("--threads %d: must be between 1 and %d", f.threads, bench.MaxThreads)
	case changed("batch-size") && (f.batch < 1 || f.batch > bench.MaxBatchSize):
		return fmt.Errorf("--batch-size %d: must be between 1 and %d", f.batch, bench.MaxBatchSize)
	case changed("duration") && so.Duration <= 0:
		return fmt.Errorf("--duration %s: must be positive, e.g. 10s", f.duration)
	}
	so.Rounds = f.rounds
	if so.Rounds < 1 {
		return fmt.Errorf("--rounds %d: must be at least 1", f.rounds)
	}
	loaded, log, err := loadConfig(cmd)
	if err != nil {
		return err
	}
	defer log.Sync()
	so.Config = loaded.Config
	so.Log = benchLogger(log)
	so.Progress = bench.NewProgress(cmd.ErrOrStderr())
	so.Command = commandLine()
	if exe, err := os.Executable(); err == nil {
		so.RawServer = []string{exe, "bench", "--raw-server"}
		so.TargetServer = []string{exe, "bench", "--mode", "target", "--hostname", "127.0.0.1", "--log-level", "error"}
		if so.Config.PluginDir != "" {
			so.TargetServer = append(so.TargetServer, "--plugin-dir", so.Config.PluginDir)
		}
		so.FloorC = f.floorBin
		if so.FloorC == "" {
			so.FloorC = filepath.Join(filepath.Dir(exe), "kvconnect-pingpong")
		}
	}
	so.MooncakeBin = f.mooncakeBin
	if so.MooncakeBin == "" {
		so.MooncakeBin = os.Getenv("KVCONNECT_MOONCAKE_BIN")
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := bench.RunSuite(ctx, so)
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	if f.asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			return err
		}
	} else {
		res.WriteMarkdown(out, false)
	}
	if f.out != "" {
		old, err := os.ReadFile(f.out)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("--out %s: %w", f.out, err)
		}
		if err := os.WriteFile(f.out, []byte(res.MergePerfDoc(string(old))), 0o644); err != nil {
			return fmt.Errorf("--out %s: %w", f.out, err)
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "kvconnect bench: wrote %s\n", f.out)
	}
	return nil
}

// commandLine is this process's command line as one could type it again:
// the binary relative to the working directory, arguments shell-quoted.
func commandLine() string {
	args := make([]string, len(os.Args))
	copy(args, os.Args)
	if wd, err := os.Getwd(); err == nil && filepath.IsAbs(args[0]) {
		if rel, err := filepath.Rel(wd, args[0]); err == nil && !strings.HasPrefix(rel, "..") {
			args[0] = rel
		}
	}
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\n'\"$;&|<>*?()[]{}`\\") {
			args[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(args, " ")
}
