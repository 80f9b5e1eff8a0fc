package bench

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvconnect/kvconnect/internal/prefault"
	"github.com/kvconnect/kvconnect/internal/shm"
	"github.com/kvconnect/kvconnect/units"
)

// Raw is the baseline: plain Go TCP sockets on loopback moving the same
// work as a kvconnect run, with nothing of kvconnect in the path. A batch
// of B blocks is striped over the connections (block i on connection
// i mod C). For each stripe the client sends a 32-byte header; for WRITE it
// sends the stripe's blocks (writev) and the server io.ReadFull's each
// block into its buffer and acks the stripe with one byte; for READ the
// server writes the blocks (writev) and the client io.ReadFull's them. A
// batch completes when every connection has finished its stripe. Each
// connection pipelines: stripes of several threads' batches may be in
// flight on it at once, matched to replies in order, as the tcp
// transport's requests are. Blocks cycle through client and server
// buffers of the same size, at the same offsets, with the layout of a
// kvconnect run.
//
// The server runs in its own process (RawOptions.ServerCommand, e.g.
// kvconnect bench --raw-server), as the target's transport plugin does, or
// in this process.
type Raw struct {
	conns  []*rawConn
	cbuf   []byte
	srv    *rawServer // in-process server
	cmd    *exec.Cmd  // or server process
	stdin  io.Closer
	wg     sync.WaitGroup
	err    atomic.Pointer[error]
	closed bool
}

// RawOptions configures NewRaw.
type RawOptions struct {
	Conns      int // connections, as transports.tcp.connections
	BufferSize int // each side's buffer
	// ServerCommand runs the server as a process: argv of a command that
	// serves as ServeRawProcess does (kvconnect bench --raw-server
	// --buffer-size N). Empty: the server runs in this process.
	ServerCommand []string
}

type rawConn struct {
	r        *Raw
	nc       net.Conn
	send     chan *stripe
	inflight chan *stripe
}

type stripe struct {
	op        byte
	count     uint32 // blocks
	stride    uint32
	bs        uint32
	partStart uint32 // the thread's blocks (see layout)
	partLen   uint32
	first     uint64 // the thread's op number of the stripe's first block
	done      *sync.WaitGroup
}

const (
	rawOpWrite = 1
	rawOpRead  = 2
	rawHeader  = 32 // op(1) pad(3) count(4) stride(4) block size(4) part start(4) part length(4) first(8)
)

func (s *stripe) encode(b []byte) {
	b[0] = s.op
	b[1], b[2], b[3] = 0, 0, 0
	binary.LittleEndian.PutUint32(b[4:], s.count)
	binary.LittleEndian.PutUint32(b[8:], s.stride)
	binary.LittleEndian.PutUint32(b[12:], s.bs)
	binary.LittleEndian.PutUint32(b[16:], s.partStart)
	binary.LittleEndian.PutUint32(b[20:], s.partLen)
	binary.LittleEndian.PutUint64(b[24:], s.first)
}

func decodeStripe(b []byte) stripe {
	return stripe{op: b[0], count: binary.LittleEndian.Uint32(b[4:]), stride: binary.LittleEndian.Uint32(b[8:]),
		bs: binary.LittleEndian.Uint32(b[12:]), partStart: binary.LittleEndian.Uint32(b[16:]),
		partLen: binary.LittleEndian.Uint32(b[20:]), first: binary.LittleEndian.Uint64(b[24:])}
}

// blocks appends the stripe's block slices of buf to out: block j of the
// stripe is the thread's op first + j*stride.
func (s *stripe) blocks(buf []byte, out [][]byte) ([][]byte, error) {
	bs := uint64(s.bs)
	if bs == 0 || s.partLen == 0 || (uint64(s.partStart)+uint64(s.partLen))*bs > uint64(len(buf)) {
		return out, fmt.Errorf("raw: blocks %d+%d of %d bytes do not fit the %d-byte buffer", s.partStart, s.partLen, bs, len(buf))
	}
	for j := range uint64(s.count) {
		off := (uint64(s.partStart) + (s.first+j*uint64(s.stride))%uint64(s.partLen)) * bs
		out = append(out, buf[off:off+bs:off+bs])
	}
	return out, nil
}

// NewRaw starts the server (a process, or in this process), opens the
// connections and touches the client buffer, so page faults stay out of
// the runs.
func NewRaw(o RawOptions) (*Raw, error) {
	if o.Conns < 1 || o.Conns > 64 {
		return nil, fmt.Errorf("raw baseline: %d connections: must be between 1 and 64 (transports.tcp.connections)", o.Conns)
	}
	if o.BufferSize < 1 {
		return nil, fmt.Errorf("--buffer-size %d: must be positive", o.BufferSize)
	}
	r := &Raw{cbuf: touched(o.BufferSize)}
	var addr string
	if len(o.ServerCommand) == 0 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("raw baseline: %w", err)
		}
		r.srv = newRawServer(ln, touched(o.BufferSize), r.fail)
		addr = ln.Addr().String()
	} else {
		var err error
		if addr, err = r.startServerProcess(o.ServerCommand); err != nil {
			return nil, err
		}
	}
	for range o.Conns {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			for _, c := range r.conns {
				c.nc.Close()
			}
			r.stopServer()
			return nil, fmt.Errorf("raw baseline: connecting to the server at %s: %w", addr, err)
		}
		r.conns = append(r.conns, &rawConn{r: r, nc: nc, send: make(chan *stripe, 64), inflight: make(chan *stripe, 1024)})
	}
	for _, c := range r.conns {
		r.wg.Add(2)
		go c.sender()
		go c.receiver()
	}
	return r, nil
}

// touched allocates a raw end's buffer and faults its pages in, for
// user-mode access and then for the kernel's copies, as the tcp
// transport's registration does (internal/prefault). It asks for huge
// pages when kvconnect's regions get them on this machine (internal/shm:
// shared memory's own setting), so the baseline and the variants it is
// compared with move the same kind of memory, equally ready.
func touched(n int) []byte {
	b := make([]byte, n)
	if _, huge, _ := shm.ShmemHuge(); huge {
		shm.AdviseHuge(b)
	}
	for i := 0; i < n; i += 4096 {
		b[i] = 1
	}
	prefault.ForKernel(context.Background(), b) // best effort, as the transport's
	return b
}

// rawServerReady prefixes the line a server process prints when it
// listens: "raw-server=127.0.0.1:port".
const rawServerReady = "raw-server="

func (r *Raw) startServerProcess(argv []string) (string, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return "", err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("raw baseline: starting the server process %s: %w", argv[0], err)
	}
	r.cmd, r.stdin = cmd, stdin
	line, err := bufio.NewReader(stdout).ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), rawServerReady)
	if err != nil || !ok {
		r.stopServer()
		return "", fmt.Errorf("raw baseline: the server process %s did not say where it listens (got %q, %v)", strings.Join(argv, " "), line, err)
	}
	return addr, nil
}

// stopServer ends the in-process server or the server process.
func (r *Raw) stopServer() error {
	if r.srv != nil {
		return r.srv.close()
	}
	if r.cmd == nil {
		return nil
	}
	r.stdin.Close() // the server process exits when its stdin ends
	done := make(chan error, 1)
	go func() { done <- r.cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		r.cmd.Process.Kill()
		return fmt.Errorf("raw baseline: the server process did not exit; killed: %v", <-done)
	}
}

// ServerPID is the server process's pid, 0 when the server runs in this
// process.
func (r *Raw) ServerPID() int {
	if r.cmd == nil || r.cmd.Process == nil {
		return 0
	}
	return r.cmd.Process.Pid
}

// Connections is the number of connections.
func (r *Raw) Connections() int { return len(r.conns) }

func (r *Raw) fail(err error) {
	r.err.CompareAndSwap(nil, &err)
}

func (r *Raw) failed() error {
	if p := r.err.Load(); p != nil {
		return *p
	}
	return nil
}

// rawServer is the server side: it accepts connections and answers
// stripes against its buffer.
type rawServer struct {
	ln   net.Listener
	buf  []byte
	fail func(error)

	mu    sync.Mutex
	conns map[net.Conn]bool
	wg    sync.WaitGroup
}

func newRawServer(ln net.Listener, buf []byte, fail func(error)) *rawServer {
	s := &rawServer{ln: ln, buf: buf, fail: fail, conns: map[net.Conn]bool{}}
	s.wg.Add(1)
	go s.accept()
	return s
}

func (s *rawServer) accept() {
	defer s.wg.Done()
	for {
		nc, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.conns == nil {
			s.mu.Unlock()
			nc.Close()
			return
		}
		s.conns[nc] = true
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serve(nc)
	}
}

func (s *rawServer) close() error {
	err := s.ln.Close()
	s.mu.Lock()
	for nc := range s.conns {
		nc.Close()
	}
	s.conns = nil
	s.mu.Unlock()
	s.wg.Wait()
	return err
}

// ServeRawProcess is the raw baseline's server process (kvconnect bench
// --raw-server): it listens on loopback, prints "raw-server=<address>" on
// stdout, and serves with a buffer of bufSize bytes until stdin ends.
func ServeRawProcess(stdin io.Reader, stdout io.Writer, bufSize int) error {
	if bufSize < 1 {
		return fmt.Errorf("--buffer-size %d: must be positive", bufSize)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	var failed atomic.Pointer[error]
	s := newRawServer(ln, touched(bufSize), func(err error) { failed.CompareAndSwap(nil, &err) })
	if _, err := fmt.Fprintf(stdout, "%s%s\n", rawServerReady, ln.Addr()); err != nil {
		s.close()
		return err
	}
	io.Copy(io.Discard, stdin)
	s.close()
	if p := failed.Load(); p != nil {
		return *p
	}
	return nil
}

// serve answers one connection's stripes.
func (s *rawServer) serve(nc net.Conn) {
	defer s.wg.Done()
	defer nc.Close()
	var hdr [rawHeader]byte
	ack := []byte{1}
	var blocks [][]byte
	for {
		if _, err := io.ReadFull(nc, hdr[:]); err != nil {
			return // the client closed
		}
		st := decodeStripe(hdr[:])
		var err error
		if blocks, err = st.blocks(s.buf, blocks[:0]); err != nil {
			s.fail(err)
			return
		}
		switch st.op {
		case rawOpWrite:
			for _, b := range blocks {
				if _, err := io.ReadFull(nc, b); err != nil {
					s.fail(fmt.Errorf("raw server: %w", err))
					return
				}
			}
			if _, err := nc.Write(ack); err != nil {
				s.fail(fmt.Errorf("raw server: %w", err))
				return
			}
		case rawOpRead:
			bufs := net.Buffers(blocks)
			if _, err := bufs.WriteTo(nc); err != nil {
				s.fail(fmt.Errorf("raw server: %w", err))
				return
			}
		default:
			s.fail(fmt.Errorf("raw server: bad op %d", st.op))
			return
		}
	}
}

// sender writes stripes in order; the receiver matches replies in the
// same order. After an error stripes are passed on unsent and the
// receiver completes them.
func (c *rawConn) sender() {
	defer c.r.wg.Done()
	defer close(c.inflight)
	hdr := make([]byte, rawHeader)
	var blocks [][]byte
	broken := false
	for s := range c.send {
		c.inflight <- s
		if broken {
			continue
		}
		s.encode(hdr)
		blocks = append(blocks[:0], hdr)
		if s.op == rawOpWrite {
			var err error
			if blocks, err = s.blocks(c.r.cbuf, blocks); err != nil {
				c.r.fail(err)
			}
		}
		bufs := net.Buffers(blocks)
		if _, err := bufs.WriteTo(c.nc); err != nil {
			c.r.fail(fmt.Errorf("raw client: %w", err))
			broken = true
			c.nc.Close()
		}
	}
}

func (c *rawConn) receiver() {
	defer c.r.wg.Done()
	var ack [1]byte
	var blocks [][]byte
	broken := false
	for s := range c.inflight {
		if !broken {
			var err error
			switch s.op {
			case rawOpWrite:
				_, err = io.ReadFull(c.nc, ack[:])
			case rawOpRead:
				if blocks, err = s.blocks(c.r.cbuf, blocks[:0]); err == nil {
					for _, b := range blocks {
						if _, err = io.ReadFull(c.nc, b); err != nil {
							break
						}
					}
				}
			}
			if err != nil {
				c.r.fail(fmt.Errorf("raw client: %w", err))
				broken = true
				c.nc.Close()
			}
		}
		s.done.Done()
	}
}

// Run measures w over the raw sockets, with the block layout of a
// kvconnect run, and returns the blocks it moved (warm-up included).
func (r *Raw) Run(ctx context.Context, w Workload, progress *Progress, label string) (Result, Blocks, error) {
	if err := w.Validate(); err != nil {
		return Result{}, nil, err
	}
	if w.BlockSize > len(r.cbuf) {
		return Result{}, nil, fmt.Errorf("--block-size %s is larger than the buffers (%s): raise --buffer-size",
			units.FormatSize(uint64(w.BlockSize)), units.FormatSize(uint64(len(r.cbuf))))
	}
	if uint64(w.BlockSize) > 1<<32-1 || len(r.cbuf)/w.BlockSize > 1<<32-1 {
		return Result{}, nil, fmt.Errorf("--block-size %d: the raw baseline handles blocks under 4GiB", w.BlockSize)
	}
	op := byte(rawOpWrite)
	if w.Op == Read {
		op = rawOpRead
	}
	C := len(r.conns)
	lay := newLayout(len(r.cbuf)/w.BlockSize, w.Threads)
	issued := make([]uint64, w.Threads)
	var cnt counters
	phase := func(d time.Duration, lat [][]time.Duration) error {
		deadline := time.Now().Add(d)
		var wg sync.WaitGroup
		for t := range w.Threads {
			wg.Add(1)
			go func() {
				defer wg.Done()
				start, n := lay.part(t)
				stripes := make([]stripe, min(C, w.BatchSize))
				var done sync.WaitGroup
				for time.Now().Before(deadline) && ctx.Err() == nil && r.failed() == nil {
					k0 := issued[t]
					issued[t] += uint64(w.BatchSize)
					began := time.Now()
					done.Add(len(stripes))
					for c := range stripes {
						stripes[c] = stripe{op: op, count: uint32((w.BatchSize - c + C - 1) / C), stride: uint32(C), bs: uint32(w.BlockSize),
							partStart: uint32(start), partLen: uint32(n), first: k0 + uint64(c), done: &done}
						r.conns[c].send <- &stripes[c]
					}
					done.Wait()
					if r.failed() != nil {
						return
					}
					if lat != nil {
						lat[t] = append(lat[t], time.Since(began))
					}
					cnt.bytes.Add(uint64(w.BatchSize) * uint64(w.BlockSize))
					cnt.ops.Add(uint64(w.BatchSize))
					cnt.batches.Add(1)
				}
			}()
		}
		wg.Wait()
		if err := r.failed(); err != nil {
			return err
		}
		return ctx.Err()
	}
	if w.Warmup > 0 {
		progress.Set("%swarming up for %v", label, w.Warmup)
		if err := phase(w.Warmup, nil); err != nil {
			return Result{}, nil, err
		}
	}
	cnt.reset()
	var pids []int
	if pid := r.ServerPID(); pid > 0 {
		pids = append(pids, pid)
	}
	before, err := snapshotCPU(pids)
	if err != nil {
		return Result{}, nil, err
	}
	lat := make([][]time.Duration, w.Threads)
	start := time.Now()
	stop := progress.ticker(250*time.Millisecond, func() {
		el := time.Since(start)
		progress.Set("%s%5.1fs/%v  %7.3f GB/s", label, el.Seconds(), w.Duration, float64(cnt.bytes.Load())/el.Seconds()/1e9)
	})
	err = phase(w.Duration, lat)
	elapsed := time.Since(start)
	stop()
	progress.Clear()
	if err != nil {
		return Result{}, nil, err
	}
	after, err := snapshotCPU(pids)
	if err != nil {
		return Result{}, nil, err
	}
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	mode := "raw, server in this process"
	if len(pids) > 0 {
		mode = "raw, server process"
	}
	res := Result{Transport: "raw", Mode: mode, Connections: C, Bytes: cnt.bytes.Load(), Ops: cnt.ops.Load(), Batches: cnt.batches.Load(), PluginPIDs: pids}
	res.HostCPU, res.PluginCPU = after.since(before)
	res.HostSwitches, res.PluginSwitches = after.switchesSince(before)
	hw, pw, idle := after.waitSince(before)
	res.HostRunDelay, res.PluginRunDelay, res.VCPUIdle, res.hostWaitKnown = hw.Seconds(), pw.Seconds(), idle, true
	res.fill(w, elapsed, all)
	return res, lay.touched(issued), nil
}

// Close ends the connections and the server and waits for every
// goroutine. It must not be called while Run is running.
func (r *Raw) Close() error {
	if r == nil || r.closed {
		return nil
	}
	r.closed = true
	for _, c := range r.conns {
		close(c.send)
	}
	// The senders then close inflight and the receivers end; closing the
	// client sockets ends the server's side.
	for _, c := range r.conns {
		c.nc.Close()
	}
	r.wg.Wait()
	return r.stopServer()
}
