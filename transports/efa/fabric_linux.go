//go:build linux && cgo

package efa

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/kvconnect/kvconnect/plugins"
)

// fabric is an opened provider and the progress thread that owns it.
// Every libfabric call runs on that thread (the domain is opened
// FI_THREAD_DOMAIN); other goroutines hand it closures through queue and
// wake it through an eventfd.
type fabric struct {
	c          *cfab
	log        *zap.Logger
	opts       Options
	info       providerInfo
	self       []byte // our fi_getname address
	maxChunk   uint64
	interval   time.Duration
	probeAfter time.Duration
	verify     bool // probe remote regions before posting
	spin       time.Duration

	mu       sync.Mutex // guards queue and closed; held around wake
	queue    []func(dead bool)
	closed   bool
	hasWork  atomic.Bool
	sleeping atomic.Bool
	exited   chan struct{}
	closeErr error

	mrMu sync.RWMutex
	mrs  map[uint64]*mrHandle // by region id

	// The region status table peers read (one token per registered
	// region) and the buffer our probes of peers' tables land in (one word
	// per op context).
	status      cmem
	statusMR    *mrHandle
	statusKey   regionKey
	statusFree  []uint32
	probeBuf    cmem
	probeMR     *mrHandle
	tokenBase   uint64
	regionSlots map[uint64]uint32 // region id -> status slot

	// Progress-thread state.
	nextKey    uint64
	pend       []*batch
	active     map[*batch]struct{}
	slots      []slotRef
	free       []uint32
	posted     int
	scratch    []postOp
	scratchIdx []int
	avs        map[string]*avEntry
	probes     map[probeKey]*probe
	probeQueue []*probe
	stopping   bool
	drainUntil time.Time
	lastCheck  time.Time
	pollErrs   int
}

// local is every open fabric of this process. A closing fabric first has
// the others stop using its address: providers that share memory between
// endpoints of one process (shm maps a same-process peer's region once and
// frees it when that peer closes) would otherwise touch freed memory.
var local struct {
	mu sync.Mutex
	m  map[*fabric]struct{}
}

// drainTimeout bounds how long Close waits for posted operations to come
// back before it closes the endpoint under them.
const drainTimeout = 2 * time.Second

// busySpin is how long the progress thread keeps polling without a
// completion while operations are posted before it sleeps (at most
// busySleep at a time, or until the provider's descriptor wakes it).
// With a wait descriptor the provider wakes the thread when completions
// arrive, so it spins only briefly and leaves the CPU to the kernel's
// socket work (tcp;ofi_rxm); without one (EFA's CQs) polling is the only
// way to see completions early.
const (
	busySpin       = 2 * time.Millisecond
	busySpinWaitFD = 50 * time.Microsecond
	busySleep      = 200 * time.Microsecond
)

// probeAfter is how long a batch's peer may complete nothing before the
// regions of its ops are probed.
const probeAfter = 200 * time.Millisecond

// probeRetries is how many times a probe that failed is retried (a
// connection the provider just dropped takes a moment to come back), and
// probeBackoff the first delay, doubled each time.
const (
	probeRetries = 4
	probeBackoff = 10 * time.Millisecond
)

func openFabric(opts Options, log *zap.Logger) (*fabric, plugins.InitResult, error) {
	if reason, ok := loadLibrary(opts.Library); !ok {
		return nil, plugins.InitResult{}, libraryError(opts.Library, reason)
	}
	if major, minor := libVersion(); major < 1 || (major == 1 && minor < minMinor) {
		return nil, plugins.InitResult{}, libraryError(opts.Library,
			fmt.Sprintf("it is libfabric %d.%d; this transport needs 1.%d or newer", major, minor, minMinor))
	}
	cinfo, rc, domains := selectInfo(opts.Provider, opts.Domain)
	if rc != 0 {
		return nil, plugins.InitResult{}, getinfoError(opts.Provider, opts.Domain, rc, fiName(rc), fiStrerror(rc), domains, probeHost())
	}
	nctx := opts.MaxInflight
	c, rc, step := openC(cinfo, nctx)
	if rc != 0 {
		ie := &plugins.InitError{Transport: Name, Step: plugins.StepBind, NativeCode: int64(rc), NativeName: fiName(rc),
			Cause: fmt.Sprintf("%s on provider %q failed: %s", step, opts.Provider, fiStrerror(rc)),
			Err:   fmt.Errorf("efa: %s: %w", step, plugins.ErrUnavailable)}
		if step == "fi_fabric" || step == "fi_domain" {
			ie.Step = plugins.StepOpenDevice
			ie.Hints = []string{"the device was found but could not be opened: check permissions on /dev/infiniband/uverbs* and the memlock limit (ulimit -l)"}
		}
		if opts.Provider == DefaultProvider {
			ie.Hints = append(ie.Hints, efaHints...)
		}
		return nil, plugins.InitResult{}, ie
	}
	name, rc := c.getname()
	if rc != 0 {
		c.free()
		return nil, plugins.InitResult{}, &plugins.InitError{Transport: Name, Step: plugins.StepBind, NativeCode: int64(rc), NativeName: fiName(rc),
			Cause: fmt.Sprintf("fi_getname on provider %q failed: %s", opts.Provider, fiStrerror(rc)),
			Err:   fmt.Errorf("efa: fi_getname: %w", plugins.ErrUnavailable)}
	}
	info := c.info
	if info.AddrFormat == fiAddrStr {
		// String addresses come back NUL-terminated; peers get the text
		// and cAddr terminates it again.
		name = bytes.TrimRight(name, "\x00")
	}
	if info.MRMode&mrBasic != 0 && info.MRMode&^(mrBasic|mrScalable) == 0 {
		// Pre-1.5 encoding: FI_MR_BASIC means these three bits.
		info.MRMode = mrVirtAddr | mrProvKey | mrAllocated
	} else if info.MRMode == mrScalable {
		info.MRMode = 0
	}
	c.info = info
	f := &fabric{
		c:           c,
		log:         log,
		opts:        opts,
		info:        info,
		self:        name,
		interval:    opts.progressInterval(info.Provider, c.waitFD),
		probeAfter:  min(probeAfter, time.Duration(opts.OpTimeout)/2),
		verify:      opts.verifyRegions(info.Provider),
		spin:        busySpin,
		exited:      make(chan struct{}),
		mrs:         map[uint64]*mrHandle{},
		active:      map[*batch]struct{}{},
		avs:         map[string]*avEntry{},
		probes:      map[probeKey]*probe{},
		regionSlots: map[uint64]uint32{},
		slots:       make([]slotRef, nctx),
		free:        make([]uint32, 0, nctx),
		scratch:     make([]postOp, 0, nctx),
		scratchIdx:  make([]int, 0, nctx),
	}
	for i := nctx - 1; i >= 0; i-- {
		f.free = append(f.free, uint32(i))
	}
	if c.waitFD {
		f.spin = busySpinWaitFD
	}
	f.maxChunk = uint64(opts.ChunkSize)
	if f.maxChunk == 0 || f.maxChunk > maxChunk {
		f.maxChunk = maxChunk
	}
	if info.MaxMsg > 0 && info.MaxMsg < f.maxChunk {
		f.maxChunk = info.MaxMsg
	}
	if err := f.openTables(); err != nil {
		f.closeTables()
		c.free()
		return nil, plugins.InitResult{}, err
	}
	ep := endpoint{Provider: info.Provider, AddrFormat: info.AddrFormat, Addr: name, Status: f.statusKey}
	addr := c.straddr(name)
	summary := fmt.Sprintf("efa %s domain %s %s mr_mode=%s", info.Provider, info.Domain, addr, mrModeString(info.MRMode))
	log.Info("efa transport up",
		zap.String("provider", info.Provider), zap.String("fabric", info.Fabric), zap.String("domain", info.Domain),
		zap.String("address", addr), zap.String("mr_mode", mrModeString(info.MRMode)),
		zap.Uint64("mr_key_size", info.MRKeySize), zap.Uint64("max_msg_size", info.MaxMsg),
		zap.Uint64("tx_size", info.TxSize), zap.Bool("cq_wait_fd", c.waitFD),
		zap.Bool("manual_progress", info.DataProgress == fiProgressManual), zap.Duration("progress_interval", f.interval),
		zap.Int("max_inflight", nctx), zap.Bool("verify_regions", f.verify))
	local.mu.Lock()
	if local.m == nil {
		local.m = map[*fabric]struct{}{}
	}
	local.m[f] = struct{}{}
	local.mu.Unlock()
	go f.loop()
	return f, plugins.InitResult{Endpoint: ep.marshal(), Summary: summary}, nil
}

// openTables allocates and registers the status table and probe buffer
// (before the progress thread starts: this is its only libfabric use off
// that thread).
func (f *fabric) openTables() error {
	var seed [8]byte
	if _, err := rand.Read(seed[:]); err != nil {
		return fmt.Errorf("efa: random token base: %w", plugins.ErrInternal)
	}
	f.tokenBase = binary.LittleEndian.Uint64(seed[:])
	n := f.opts.MaxRegions
	f.status = newCmem(8 * n)
	f.probeBuf = newCmem(8 * len(f.slots))
	if f.status.p == nil || f.probeBuf.p == nil {
		return &plugins.InitError{Transport: Name, Step: plugins.StepRegisterMemory, Cause: "out of memory for the region status table",
			Err: fmt.Errorf("efa: status table: %w", plugins.ErrUnavailable)}
	}
	f.statusFree = make([]uint32, 0, n)
	for i := n - 1; i >= 0; i-- {
		f.statusFree = append(f.statusFree, uint32(i))
	}
	h, k, err := f.register("the region status table", f.status.bytes(), accessStatus)
	if err != nil {
		return err
	}
	f.statusMR, f.statusKey = h, k
	if f.info.MRMode&mrLocal != 0 {
		h, _, err := f.register("the probe buffer", f.probeBuf.bytes(), accessProbe)
		if err != nil {
			return err
		}
		f.probeMR = h
	}
	return nil
}

func (f *fabric) closeTables() {
	for _, h := range []*mrHandle{f.statusMR, f.probeMR} {
		if h != nil {
			f.c.mrClose(h)
		}
	}
	f.statusMR, f.probeMR = nil, nil
	f.status.free()
	f.probeBuf.free()
}

// enqueue hands fn to the progress thread; false once it has stopped.
func (f *fabric) enqueue(fn func(dead bool)) bool {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return false
	}
	f.queue = append(f.queue, fn)
	f.hasWork.Store(true)
	if f.sleeping.Load() {
		f.c.wake()
	}
	f.mu.Unlock()
	return true
}

// do runs fn on the progress thread and returns its error; ErrClosed if
// the thread has stopped.
func (f *fabric) do(fn func() error) error {
	res := make(chan error, 1)
	if !f.enqueue(func(dead bool) {
		if dead {
			res <- fmt.Errorf("efa: transport closed: %w", plugins.ErrClosed)
			return
		}
		res <- fn()
	}) {
		return fmt.Errorf("efa: transport closed: %w", plugins.ErrClosed)
	}
	return <-res
}

func (f *fabric) runQueue(dead bool) {
	f.mu.Lock()
	q := f.queue
	f.queue = nil
	f.hasWork.Store(false)
	f.mu.Unlock()
	for _, fn := range q {
		fn(dead)
	}
}

// loop is the progress thread. With operations posted it polls the
// completion queue continuously (sleeping briefly once nothing came back
// for busySpin); idle, it sleeps until the provider's wait descriptor says
// there is progress to make (an incoming RMA on tcp), work is queued, or
// progress_interval passes, then progresses the provider again. So an
// idle target keeps serving its peers' RMA without spinning.
func (f *fabric) loop() {
	runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
	defer close(f.exited)
	slots := make([]uint32, pollBatch)
	lastDone := time.Now()
	for !f.stopping {
		if f.hasWork.Load() {
			f.runQueue(false)
			if f.stopping {
				break
			}
		}
		f.postProbes()
		f.postPending()
		n, e := f.c.poll(slots)
		got := f.handle(n, e, slots)
		now := time.Now()
		if now.Sub(f.lastCheck) >= time.Millisecond {
			f.lastCheck = now
			f.checkTimeouts(now)
		}
		if got > 0 {
			lastDone = now
			continue
		}
		if f.posted > 0 || len(f.pend) > 0 || len(f.probeQueue) > 0 {
			if now.Sub(lastDone) < f.spin {
				continue
			}
			f.sleep(min(busySleep, f.interval))
			continue
		}
		f.sleep(f.interval)
		lastDone = time.Now()
	}
	f.teardown(slots)
}

// sleep blocks for at most d unless work is queued.
func (f *fabric) sleep(d time.Duration) {
	f.sleeping.Store(true)
	if !f.hasWork.Load() {
		f.c.block(d)
	}
	f.sleeping.Store(false)
}
