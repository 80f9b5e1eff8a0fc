// Command pd-disagg is a prefill/decode disaggregation demo on loopback.
//
// It starts a decode node as a separate process, then runs a prefill node
// that fills a few hundred MiB of KV blocks laid out per layer with known
// content, pushes every block to the decode node in batches (addressed by
// the decode node's absolute buffer addresses, as vLLM's MooncakeConnector
// does), and tells the decode node which blocks landed where with their
// checksums. The decode node verifies every block and reports.
//
//	make demo            # builds bin/ and runs this
//	bin/pd-disagg -layers 32 -blocks 64 -block-size 128KiB
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/kvconnect/kvconnect/connector"
	"github.com/kvconnect/kvconnect/units"
)

type layout struct {
	Layers    int    `json:"layers"`
	Blocks    int    `json:"blocks"` // per layer
	BlockSize uint64 `json:"block_size"`
}

func (l layout) total() uint64 { return uint64(l.Layers*l.Blocks) * l.BlockSize }

// offset is where block b of layer ly lives in a node's KV region.
func (l layout) offset(ly, b int) uint64 { return uint64(ly*l.Blocks+b) * l.BlockSize }

// decodeBlock is the decode node's block id for prefill block b of a
// layer: the decode side's allocator hands out scattered ids, as vLLM's
// block manager does.
func (l layout) decodeBlock(ly, b int) int { return (b*7 + ly) % l.Blocks }

// manifest is what prefill tells decode once the blocks are written.
type manifest struct {
	Layout layout   `json:"layout"`
	CRC    []uint32 `json:"crc"` // per (layer, decode block), Castagnoli
}

var crcTable = crc32.MakeTable(crc32.Castagnoli)

func main() {
	role := flag.String("role", "demo", "demo (start decode, run prefill), decode, or prefill")
	layers := flag.Int("layers", 32, "model layers")
	blocks := flag.Int("blocks", 64, "KV blocks per layer")
	blockSize := flag.String("block-size", "128KiB", "bytes per KV block")
	batch := flag.Int("batch", 128, "ops per batch")
	inflight := flag.Int("inflight", 4, "batches in flight")
	session := flag.String("decode", "", "decode node session id (prefill role)")
	protocol := flag.String("protocol", "tcp", "transport")
	pluginDir := flag.String("plugin-dir", "", "directory holding kvconnect-transport-* (default: beside this binary)")
	logLevel := flag.String("log-level", "warn", "log level")
	hold := flag.Bool("hold", false, "decode role: once verified, keep the node up until standard input closes (the demo closes it when prefill is done)")
	flag.Parse()

	bs, err := units.ParseSize(*blockSize)
	if err != nil || bs == 0 {
		fatal(fmt.Errorf("-block-size %q: want a size like 128KiB", *blockSize))
	}
	if *layers < 1 || *blocks < 1 || *batch < 1 || *inflight < 1 {
		fatal(errors.New("-layers, -blocks, -batch and -inflight must be at least 1"))
	}
	lay := layout{Layers: *layers, Blocks: *blocks, BlockSize: bs}
	log, err := newLogger(*logLevel)
	if err != nil {
		fatal(err)
	}
	cfg := connector.Config{Protocol: *protocol, PluginDir: *pluginDir}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	switch *role {
	case "decode":
		var until io.Reader
		if *hold {
			until = os.Stdin
		}
		err = runDecode(ctx, cfg, lay, until, log)
	case "prefill":
		_, err = runPrefill(ctx, cfg, lay, *session, *batch, *inflight, log)
	case "demo":
		err = runDemo(ctx, cfg, lay, *batch, *inflight, log)
	default:
		err = fmt.Errorf("-role %q: want demo, decode or prefill", *role)
	}
	if err != nil {
		fatal(err)
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "pd-disagg:", err)
	os.Exit(1)
}

// runDemo starts the decode node as a child process and runs prefill here.
func runDemo(ctx context.Context, cfg connector.Config, lay layout, batch, inflight int, log *zap.Logger) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	args := []string{"-role", "decode", "-layers", fmt.Sprint(lay.Layers), "-blocks", fmt.Sprint(lay.Blocks),
		"-block-size", fmt.Sprint(lay.BlockSize), "-protocol", cfg.Protocol, "-log-level", log.Level().String(), "-hold"}
	if cfg.PluginDir != "" {
		args = append(args, "-plugin-dir", cfg.PluginDir)
	}
	child := exec.CommandContext(ctx, self, args...)
	child.Stderr = os.Stderr
	out, err := child.StdoutPipe()
	if err != nil {
		return err
	}
	// The decode node holds its node open until this closes: see runDecode.
	done, err := child.StdinPipe()
	if err != nil {
		return err
	}
	defer done.Close()
	if err := child.Start(); err != nil {
		return fmt.Errorf("starting the decode node: %w", err)
	}
	defer child.Process.Kill()
	lines := bufio.NewScanner(out)
	session := ""
	for lines.Scan() {
		line := lines.Text()
		fmt.Println("[decode] " + line)
		if s, ok := strings.CutPrefix(line, "ready session="); ok {
			session = strings.Fields(s)[0]
			break
		}
	}
	if session == "" {
		child.Wait()
		return errors.New("the decode node exited before it was ready")
	}
	res, err := runPrefill(ctx, cfg, lay, session, batch, inflight, log)
	done.Close() // prefill has its answers: the decode node may close
	if err != nil {
		return err
	}
	verified := ""
	for lines.Scan() {
		line := lines.Text()
		fmt.Println("[decode] " + line)
		if strings.HasPrefix(line, "verified ") {
			verified = line
		}
	}
	if err := child.Wait(); err != nil {
		return fmt.Errorf("decode node: %w", err)
	}
	if verified == "" {
		return errors.New("the decode node did not report verification")
	}
	fmt.Printf("pd-disagg: transport=%s mode=%s bytes=%d (%s) time=%v throughput=%.2f GB/s (1 GB = 1e9 B) %s\n",
		res.transport, res.mode, res.bytes, units.FormatSize(res.bytes), res.elapsed.Round(time.Microsecond),
		float64(res.bytes)/res.elapsed.Seconds()/1e9, verified)
	return nil
}

func fillBlock(b []byte, ly, blk int) {
	r := rand.New(rand.NewPCG(uint64(ly)<<32|uint64(blk), 0x6b76636f6e6e6563))
	for i := 0; i+8 <= len(b); i += 8 {
		v := r.Uint64()
		b[i], b[i+1], b[i+2], b[i+3], b[i+4], b[i+5], b[i+6], b[i+7] =
			byte(v), byte(v>>8), byte(v>>16), byte(v>>24), byte(v>>32), byte(v>>40), byte(v>>48), byte(v>>56)
	}
}

type prefillResult struct {
	transport, mode string
	bytes           uint64
	elapsed         time.Duration
}

func runPrefill(ctx context.Context, cfg connector.Config, lay layout, session string, batch, inflight int, log *zap.Logger) (prefillResult, error) {
	if session == "" {
		return prefillResult{}, errors.New("prefill needs -decode <session id>")
	}
	c, err := connector.New(ctx, cfg, connector.WithLogger(log))
	if err != nil {
		return prefillResult{}, err
	}
	defer c.Close()
	kv, err := c.Alloc(ctx, int(lay.total()))
	if err != nil {
		return prefillResult{}, err
	}
	m := manifest{Layout: lay, CRC: make([]uint32, lay.Layers*lay.Blocks)}
	for ly := 0; ly < lay.Layers; ly++ {
		for b := 0; b < lay.Blocks; b++ {
			blk := kv.Bytes()[lay.offset(ly, b) : lay.offset(ly, b)+lay.BlockSize]
			fillBlock(blk, ly, b)
			m.CRC[ly*lay.Blocks+lay.decodeBlock(ly, b)] = crc32.Checksum(blk, crcTable)
		}
	}
	peer, err := c.Open(ctx, session)
	if err != nil {
		return prefillResult{}, err
	}
	regions := peer.Regions()
	if len(regions) != 1 || regions[0].Len < lay.total() {
		return prefillResult{}, fmt.Errorf("decode node %s publishes %d regions; want one of at least %d bytes", session, len(regions), lay.total())
	}
	remote := regions[0].Addr
	ops := make([]connector.Op, 0, lay.Layers*lay.Blocks)
	for ly := 0; ly < lay.Layers; ly++ {
		for b := 0; b < lay.Blocks; b++ {
			ops = append(ops, connector.Op{
				Kind: connector.OpWrite, LocalRegion: kv.ID(), LocalOffset: lay.offset(ly, b),
				RemoteOffset: remote + lay.offset(ly, lay.decodeBlock(ly, b)), // absolute address, RemoteRegion 0
				Length:       lay.BlockSize,
			})
		}
	}
	fmt.Printf("prefill: pushing %d blocks (%d layers x %d blocks x %s) to %s over %s\n",
		len(ops), lay.Layers, lay.Blocks, units.FormatSize(lay.BlockSize), session, peer.Transport())
	start := time.Now()
	var pending []*connector.Batch
	for i := 0; i < len(ops); i += batch {
		if len(pending) == inflight {
			if err := pending[0].Wait(ctx); err != nil {
				return prefillResult{}, err
			}
			pending = pending[1:]
		}
		b, err := c.Submit(ctx, peer, ops[i:min(i+batch, len(ops))])
		if err != nil {
			return prefillResult{}, err
		}
		pending = append(pending, b)
	}
	for _, b := range pending {
		if err := b.Wait(ctx); err != nil {
			return prefillResult{}, err
		}
	}
	elapsed := time.Since(start)
	body, err := json.Marshal(m)
	if err != nil {
		return prefillResult{}, err
	}
	if err := c.Notify(ctx, session, "kv_done", string(body)); err != nil {
		return prefillResult{}, err
	}
	st := c.Status()
	fmt.Printf("prefill: wrote %s in %v (%.2f GB/s) via transport=%s (%s, pid %d)\n",
		units.FormatSize(lay.total()), elapsed.Round(time.Microsecond), float64(lay.total())/elapsed.Seconds()/1e9, st.Transport, st.Mode, st.PluginPID)
	return prefillResult{transport: st.Transport, mode: st.Mode, bytes: lay.total(), elapsed: elapsed}, nil
}

// runDecode runs the decode node until prefill's kv_done notification has
// been verified, then, when hold is not nil, until hold ends (EOF): the
// demo keeps the node up until prefill has printed its summary. Closing
// at once is safe too: Close still answers a notification it delivered.
func runDecode(ctx context.Context, cfg connector.Config, lay layout, hold io.Reader, log *zap.Logger) error {
	c, err := connector.New(ctx, cfg, connector.WithLogger(log))
	if err != nil {
		return err
	}
	defer c.Close()
	kv, err := c.Alloc(ctx, int(lay.total()))
	if err != nil {
		return err
	}
	st := c.Status()
	fmt.Printf("ready session=%s transport=%s mode=%s plugin_pid=%d region=%s\n", c.SessionID(), st.Transport, st.Mode, st.PluginPID, units.FormatSize(lay.total()))
	var n connector.Notification
	select {
	case <-ctx.Done():
		return ctx.Err()
	case n = <-c.Notifications():
	case <-time.After(5 * time.Minute):
		return errors.New("decode: no kv_done notification within 5 minutes")
	}
	var m manifest
	if err := json.Unmarshal([]byte(n.Msg), &m); err != nil || n.Name != "kv_done" {
		return fmt.Errorf("decode: unexpected notification %q from %s: %v", n.Name, n.From, err)
	}
	if m.Layout != lay || len(m.CRC) != lay.Layers*lay.Blocks {
		return fmt.Errorf("decode: prefill's layout %+v differs from ours %+v", m.Layout, lay)
	}
	good := 0
	for ly := 0; ly < lay.Layers; ly++ {
		for b := 0; b < lay.Blocks; b++ {
			blk := kv.Bytes()[lay.offset(ly, b) : lay.offset(ly, b)+lay.BlockSize]
			if crc32.Checksum(blk, crcTable) == m.CRC[ly*lay.Blocks+b] {
				good++
			}
		}
	}
	fmt.Printf("verified %d/%d blocks\n", good, len(m.CRC))
	if good != len(m.CRC) {
		return fmt.Errorf("decode: %d blocks have the wrong checksum", len(m.CRC)-good)
	}
	if hold != nil {
		io.Copy(io.Discard, hold)
	}
	return nil
}

// newLogger is a console logger on stderr at level (debug, info, warn,
// error).
func newLogger(level string) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("--log-level %q: must be debug, info, warn or error", level)
	}
	cfg := zap.NewDevelopmentEncoderConfig()
	cfg.EncodeTime = zapcore.TimeEncoderOfLayout("15:04:05.000")
	return zap.New(zapcore.NewCore(zapcore.NewConsoleEncoder(cfg), zapcore.Lock(os.Stderr), lvl)), nil
}
