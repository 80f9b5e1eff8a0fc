//go:build linux && cgo

package efa

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unsafe"

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

// slotRef is what an op context stands for: a chunk of a batch, or a
// probe.
type slotRef struct {
	b  *batch
	c  int32
	pr *probe
}

// peerConn is a peer as the progress thread knows it.
type peerConn struct {
	name         string
	av           *avEntry
	rawKeys      []uint64
	status       regionKey // the peer's status table
	statusRKey   uint64
	posted       int // contexts posted to this peer (chunks and probes)
	probes       int // probes queued or posted
	closed       bool
	released     bool
	lastProgress time.Time
	lastError    time.Time // when an operation to the peer last completed with an error
}

type avEntry struct {
	key  string
	addr uint64
	refs int
	dead bool // the peer was a transport of this process and closed
	// posted counts contexts posted to this address; drained is closed
	// when it reaches 0 after the peer started closing.
	posted  int
	drained chan struct{}
}

// addPosted accounts for n contexts posted to conn (negative: completed).
func (c *peerConn) addPosted(n int) {
	c.posted += n
	if av := c.av; av != nil {
		av.posted += n
		if av.posted == 0 && av.drained != nil {
			close(av.drained)
			av.drained = nil
		}
	}
}

// dead says the peer is a transport of this process that closed: nothing
// may be posted to it any more.
func (c *peerConn) dead() bool { return c.av != nil && c.av.dead }

// local is every open fabric of this process. A closing fabric first has
// the others stop using its address: providers that share memory between
// endpoints of one process (shm maps a same-process peer's region once and
// frees it when that peer closes) would otherwise touch freed memory.
var local struct {
	mu sync.Mutex
	m  map[*fabric]struct{}
}

// probeKey names one question: is region id of conn still registered?
type probeKey struct {
	conn   *peerConn
	region uint64
}

// probe reads the word for a peer's region in the peer's status table.
// Chunks that failed wait for the answer to know why; ops that stalled
// fail at once if the region is gone.
type probe struct {
	key          probeKey
	rr           *remoteRegion
	chunks       []chunkRef
	ops          []opRef
	gates        []*batch // batches waiting for the answer before they post
	tries        int
	notBefore    time.Time
	refusedSince time.Time
	lastErr      string
	evidence     bool // an operation to the peer completed with an error
}

type chunkRef struct {
	b   *batch
	c   int32
	err error
}

type opRef struct {
	b  *batch
	op int32
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

// register registers mem and returns its handle and the key fields peers
// need: memory key (or raw key), RMA base and size.
func (f *fabric) register(what string, mem []byte, access uint64) (*mrHandle, regionKey, error) {
	// Requested keys (no FI_MR_PROV_KEY) are never reused, so a peer
	// holding a stale key cannot reach a later registration.
	f.nextKey++
	h, rc := f.c.mrReg(mem, access, f.nextKey)
	if rc != 0 {
		return nil, regionKey{}, &plugins.InitError{Transport: Name, Step: plugins.StepRegisterMemory, NativeCode: int64(rc), NativeName: fiName(rc),
			Cause: fmt.Sprintf("fi_mr_reg of %s (%d bytes, mr_mode %s) failed: %s", what, len(mem), mrModeString(f.info.MRMode), fiStrerror(rc)),
			Hints: []string{"check the locked-memory limit (ulimit -l; LimitMEMLOCK=infinity for services, --ulimit memlock=-1 for containers)",
				"a provider out of memory keys needs fewer, larger regions"},
			Err: fmt.Errorf("efa: register %s: %w", what, plugins.ErrUnavailable)}
	}
	k := regionKey{Key: h.key, Size: uint64(len(mem))}
	if f.info.MRMode&mrVirtAddr != 0 {
		// The RMA address is this process's virtual address: in a plugin
		// process that is where the plugin mapped the region, not
		// Region.Addr (the host's).
		k.Flags |= keyFlagVirtAddr
		k.Base = uint64(uintptr(unsafe.Pointer(unsafe.SliceData(mem))))
	}
	if f.info.MRMode&mrRaw != 0 && (f.info.MRKeySize > 8 || h.key == fiKeyNotAvail) {
		if rc := f.c.mrRawKey(h); rc != 0 {
			f.c.mrClose(h)
			return nil, regionKey{}, fmt.Errorf("efa: fi_mr_raw_attr of %s: %s (%s %d): %w", what, fiStrerror(rc), fiName(rc), rc, plugins.ErrUnavailable)
		}
		k.Flags |= keyFlagRaw
		k.Raw = h.raw
		k.Base = h.base
	}
	h.base = k.Base
	return h, k, nil
}

// mrModeString names the bits of an mr_mode.
func mrModeString(m uint64) string {
	names := []struct {
		bit  uint64
		name string
	}{
		{mrLocal, "FI_MR_LOCAL"}, {mrVirtAddr, "FI_MR_VIRT_ADDR"}, {mrAllocated, "FI_MR_ALLOCATED"},
		{mrProvKey, "FI_MR_PROV_KEY"}, {mrEndpoint, "FI_MR_ENDPOINT"}, {mrRaw, "FI_MR_RAW"},
		{mrRMAEvent, "FI_MR_RMA_EVENT"}, {mrMMUNotify, "FI_MR_MMU_NOTIFY"}, {mrHMEM, "FI_MR_HMEM"},
		{mrCollective, "FI_MR_COLLECTIVE"},
	}
	var out []string
	for _, n := range names {
		if m&n.bit != 0 {
			out = append(out, n.name)
			m &^= n.bit
		}
	}
	if m != 0 {
		out = append(out, fmt.Sprintf("0x%x", m))
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, "|")
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

// handle accounts for what poll returned; it returns how many completions
// it processed.
func (f *fabric) handle(n int, e cqError, slots []uint32) int {
	switch {
	case n > 0:
		for _, s := range slots[:n] {
			f.complete(s, nil)
		}
		return n
	case n == -fiEAVAIL:
		f.complete(e.slot, &e)
		return 1
	case n == -fiEAGAIN || n == 0:
		return 0
	}
	if f.pollErrs < 10 {
		f.pollErrs++
		f.log.Warn("efa: reading the completion queue failed", zap.Int("code", n), zap.String("name", fiName(n)), zap.String("error", fiStrerror(n)))
	}
	return 0
}

// complete finishes what was posted with context slot.
func (f *fabric) complete(slot uint32, e *cqError) {
	if int(slot) >= len(f.slots) || (f.slots[slot].b == nil && f.slots[slot].pr == nil) {
		if e != nil {
			f.log.Warn("efa: completion error for an unknown context", zap.Int("err", e.err), zap.String("text", e.text))
		}
		return
	}
	ref := f.slots[slot]
	f.slots[slot] = slotRef{}
	f.free = append(f.free, slot)
	f.posted--
	if ref.pr != nil {
		f.probeDone(ref.pr, slot, e)
		return
	}
	b := ref.b
	c := &b.chunks[ref.c]
	conn := b.conn
	conn.addPosted(-1)
	conn.lastProgress = time.Now()
	if e != nil {
		conn.lastError = conn.lastProgress
	}
	if e == nil {
		f.finish(b, c, nil)
	} else {
		err := f.opError(c, conn, e.err, e.provErrno, e.text)
		if f.stopping || c.rr == nil {
			f.finish(b, c, err)
		} else {
			// Why did it fail? Ask the peer's status table whether the
			// region is still registered: providers report a rejected key
			// as a broken connection (tcp) or not at all (shm).
			p := f.probe(conn, c.rr)
			p.evidence = true
			p.chunks = append(p.chunks, chunkRef{b: b, c: ref.c, err: err})
		}
	}
	f.maybeRelease(conn)
}

// finish finishes chunk c of b and retires b once every op is final.
func (f *fabric) finish(b *batch, c *chunk, err error) {
	b.finishChunk(c, err)
	if b.unreported == 0 {
		delete(f.active, b)
	}
}

func (f *fabric) maybeRelease(conn *peerConn) {
	if conn.closed && conn.posted == 0 && conn.probes == 0 {
		f.releaseConn(conn)
	}
}

func (f *fabric) opError(c *chunk, conn *peerConn, code, provErrno int, text string) error {
	kind := "fi_read"
	if c.write {
		kind = "fi_write"
	}
	if code < 0 {
		code = -code
	}
	detail := fmt.Sprintf("%s %d", fiName(code), -code)
	if provErrno != 0 || text != "" {
		detail += fmt.Sprintf(", provider errno %d: %s", provErrno, text)
	}
	return fmt.Errorf("efa: %s of %d bytes to peer %s failed: %s (%s): %w", kind, c.n, conn.name, fiStrerror(code), detail, opSentinel(code))
}

func regionGone(conn *peerConn, rr *remoteRegion) error {
	return fmt.Errorf("efa: peer %s no longer has region %d registered (its status table says so): %w", conn.name, rr.id, plugins.ErrUnknownRegion)
}

// probe returns the probe of rr at conn, queueing a new one if none is
// pending.
func (f *fabric) probe(conn *peerConn, rr *remoteRegion) *probe {
	k := probeKey{conn: conn, region: rr.id}
	if p := f.probes[k]; p != nil {
		return p
	}
	p := &probe{key: k, rr: rr}
	f.probes[k] = p
	f.probeQueue = append(f.probeQueue, p)
	conn.probes++
	return p
}

// postProbes posts queued probes (those due) while contexts are free. A
// probe the provider keeps refusing (FI_EAGAIN, as rxm does while it
// cannot reconnect to a dead peer) for probeAfter counts as failed.
func (f *fabric) postProbes() {
	if len(f.probeQueue) == 0 {
		return
	}
	now := time.Now()
	queue := f.probeQueue
	f.probeQueue = nil
	var later []*probe
	for i, p := range queue {
		if len(f.free) == 0 {
			later = append(later, queue[i:]...)
			break
		}
		conn := p.key.conn
		if conn.dead() {
			p.lastErr = "the peer closed"
			f.resolveProbe(p, false, false)
			continue
		}
		if p.notBefore.After(now) {
			later = append(later, p)
			continue
		}
		slot := f.free[len(f.free)-1]
		var desc uintptr
		if f.probeMR != nil {
			desc = f.probeMR.desc
		}
		op := postOp{laddr: f.probeBuf.addr() + uint64(slot)*8, n: 8, raddr: conn.status.Base + uint64(p.rr.key.Slot)*8,
			rkey: conn.statusRKey, dest: conn.av.addr, desc: desc, slot: slot}
		f.probeBuf.setWord(slot, 0)
		posted, rc := f.c.post([]postOp{op})
		switch {
		case posted == 1:
			p.refusedSince = time.Time{}
			f.free = f.free[:len(f.free)-1]
			f.slots[slot] = slotRef{pr: p}
			f.posted++
			conn.addPosted(1)
		case rc == -fiEAGAIN:
			// Refused: normal while a connection is being made (to a
			// target that may be slow to progress), a sign of a dead
			// peer once an operation to it failed. So refusals end the
			// probe after probeAfter only with that evidence, else after
			// op_timeout.
			if p.refusedSince.IsZero() {
				p.refusedSince = now
			}
			limit := time.Duration(f.opts.OpTimeout)
			if p.evidence || (!conn.lastError.IsZero() && now.Sub(conn.lastError) < limit) {
				limit = f.probeAfter
			}
			if now.Sub(p.refusedSince) < limit {
				later = append(later, p)
				continue
			}
			p.lastErr = fmt.Sprintf("the provider refused operations to the peer for %v (FI_EAGAIN)", limit)
			f.resolveProbe(p, false, false)
		default:
			p.lastErr = fmt.Sprintf("%s (%s %d)", fiStrerror(rc), fiName(rc), rc)
			f.resolveProbe(p, false, false)
		}
	}
	f.probeQueue = append(later, f.probeQueue...)
}

// probeDone handles a probe's completion; a failed probe is retried a few
// times with backoff.
func (f *fabric) probeDone(p *probe, slot uint32, e *cqError) {
	conn := p.key.conn
	conn.addPosted(-1)
	if e != nil {
		p.evidence = true
		conn.lastError = time.Now()
		p.lastErr = fmt.Sprintf("%s (%s %d)", fiStrerror(e.err), fiName(e.err), -e.err)
		if p.tries < probeRetries && !f.stopping && !conn.dead() {
			p.notBefore = time.Now().Add(probeBackoff << p.tries)
			p.tries++
			f.probeQueue = append(f.probeQueue, p)
			return
		}
		f.resolveProbe(p, false, false)
		return
	}
	f.resolveProbe(p, true, f.probeBuf.word(slot) != p.rr.key.Token)
}

// resolveProbe gives the waiters of p the answer: known says the probe
// read the peer's table, gone that the region is not registered there.
func (f *fabric) resolveProbe(p *probe, known, gone bool) {
	conn := p.key.conn
	delete(f.probes, p.key)
	conn.probes--
	for _, w := range p.chunks {
		err := w.err
		if known && gone {
			err = fmt.Errorf("%w (the operation failed with: %v)", regionGone(conn, p.rr), w.err)
		}
		f.finish(w.b, &w.b.chunks[w.c], err)
	}
	if gone || (!known && p.lastErr != "") {
		// The region is gone, or the stalled peer fails even a status
		// read (after retries): the stalled ops will not complete.
		err := regionGone(conn, p.rr)
		if !known {
			err = fmt.Errorf("efa: peer %s completes nothing and fails status reads: %s: %w", conn.name, p.lastErr, plugins.ErrPeerUnreachable)
		}
		for _, w := range p.ops {
			w.b.failOp(w.op, err)
			if w.b.unreported == 0 {
				delete(f.active, w.b)
			}
		}
	}
	for _, b := range p.gates {
		if !known || gone {
			err := regionGone(conn, p.rr)
			if !known {
				err = fmt.Errorf("efa: cannot reach peer %s to check region %d before posting: %s: %w", conn.name, p.rr.id, p.lastErr, plugins.ErrPeerUnreachable)
			}
			for i := range b.ops {
				if b.ops[i].rr == p.rr {
					b.failOp(int32(i), err)
				}
			}
			if b.unreported == 0 {
				delete(f.active, b)
			}
		}
		b.gates--
		if b.gates == 0 {
			f.pend = append(f.pend, b)
		}
	}
	f.maybeRelease(conn)
}

// postPending posts chunks of pending batches while contexts are free,
// taking a turn of at most 64 chunks per batch so concurrent batches share
// the queue. Chunks of ops already final (failed, timed out, canceled)
// are dropped instead.
func (f *fabric) postPending() {
	var refused []*peerConn // peers whose posts returned FI_EAGAIN this round
	for turns := len(f.pend) + len(f.free)/64 + 1; turns > 0 && len(f.pend) > 0 && len(f.free) > 0; turns-- {
		b := f.pend[0]
		f.pend = f.pend[1:]
		if b.conn.dead() {
			b.failUnreported(fmt.Errorf("efa: peer %s closed: %w", b.conn.name, plugins.ErrPeerUnreachable))
			delete(f.active, b)
			continue
		}
		if slices.Contains(refused, b.conn) {
			f.pend = append(f.pend, b)
			continue
		}
		k := min(len(f.free), 64)
		ops := f.scratch[:0]
		idx := f.scratchIdx[:0]
		for i := b.next; i < len(b.chunks) && len(ops) < k; i++ {
			c := &b.chunks[i]
			if c.done {
				continue
			}
			if b.ops[c.op].reported {
				f.finish(b, c, b.ops[c.op].err)
				continue
			}
			ops = append(ops, postOp{laddr: uint64(c.laddr), n: c.n, raddr: c.raddr, rkey: c.rkey, dest: b.conn.av.addr,
				desc: c.desc, slot: f.free[len(f.free)-1-len(ops)], write: c.write})
			idx = append(idx, i)
		}
		posted, rc := 0, 0
		if len(ops) > 0 {
			posted, rc = f.c.post(ops)
		}
		for j := 0; j < posted; j++ {
			f.slots[ops[j].slot] = slotRef{b: b, c: int32(idx[j])}
		}
		f.free = f.free[:len(f.free)-posted]
		f.posted += posted
		if b.conn.posted == 0 && posted > 0 {
			b.conn.lastProgress = time.Now()
		}
		b.conn.addPosted(posted)
		// Everything before the first unposted chunk is posted or done.
		switch {
		case posted < len(idx):
			b.next = idx[posted]
		case len(idx) > 0:
			b.next = idx[len(idx)-1] + 1
		default:
			b.next = len(b.chunks)
		}
		if rc != 0 && rc != -fiEAGAIN {
			c := &b.chunks[b.next]
			b.next++
			f.finish(b, c, f.opError(c, b.conn, rc, 0, ""))
		}
		if b.next < len(b.chunks) {
			f.pend = append(f.pend, b)
		}
		if rc == -fiEAGAIN {
			// The provider's queue (or this peer's connection) is full:
			// progress first; other peers may still take work.
			refused = append(refused, b.conn)
		}
	}
}

// checkTimeouts fails the ops of batches whose peer completed nothing for
// op_timeout since the batch started, and probes the regions of batches
// stalled for probeAfter (an op to a region its owner deregistered may
// never complete).
func (f *fabric) checkTimeouts(now time.Time) {
	timeout := time.Duration(f.opts.OpTimeout)
	for b := range f.active {
		last := b.since
		if b.conn.lastProgress.After(last) {
			last = b.conn.lastProgress
		}
		idle := now.Sub(last)
		if idle >= timeout {
			b.failUnreported(fmt.Errorf("efa: peer %s completed nothing for %v (op_timeout): %w", b.conn.name, timeout, plugins.ErrTimeout))
			delete(f.active, b)
			continue
		}
		if idle < f.probeAfter || now.Sub(b.lastProbe) < f.probeAfter {
			continue
		}
		b.lastProbe = now
		for i := range b.ops {
			o := &b.ops[i]
			if !o.reported && o.rr != nil {
				p := f.probe(b.conn, o.rr)
				p.ops = append(p.ops, opRef{b: b, op: int32(i)})
			}
		}
	}
}

// newBatch makes a batch for conn.
func (f *fabric) newBatch(conn *peerConn, nops int) *batch { return newBatch(conn, nops, f.maxChunk) }

// run submits b and waits for its results.
func (f *fabric) run(ctx context.Context, b *batch, results []plugins.OpResult) error {
	start := func(dead bool) {
		switch {
		case dead:
			b.failUnreported(fmt.Errorf("efa: transport closed: %w", plugins.ErrClosed))
			return
		case b.conn.closed:
			b.failUnreported(fmt.Errorf("efa: peer %s disconnected: %w", b.conn.name, plugins.ErrClosed))
			return
		case b.conn.dead():
			b.failUnreported(fmt.Errorf("efa: peer %s closed: %w", b.conn.name, plugins.ErrPeerUnreachable))
			return
		}
		b.since = time.Now()
		b.lastProbe = b.since
		f.active[b] = struct{}{}
		if !f.verify {
			f.pend = append(f.pend, b)
			return
		}
		// Check every remote region of the batch is still registered
		// before anything is posted (see Options.VerifyRegions).
		seen := map[*remoteRegion]bool{}
		for i := range b.ops {
			rr := b.ops[i].rr
			if rr == nil || b.ops[i].reported || seen[rr] {
				continue
			}
			seen[rr] = true
			p := f.probe(b.conn, rr)
			p.gates = append(p.gates, b)
			b.gates++
		}
		if b.gates == 0 {
			f.pend = append(f.pend, b)
		}
	}
	if !f.enqueue(start) {
		err := fmt.Errorf("efa: transport closed: %w", plugins.ErrClosed)
		for i := range b.ops {
			if b.ops[i].entry != nil {
				b.ops[i].entry.Release()
				b.ops[i].entry = nil
			}
			if !b.ops[i].pre {
				results[i].Err = err
			}
		}
		return err
	}
	select {
	case <-b.done:
	case <-ctx.Done():
		cerr := fmt.Errorf("efa: transfer: %w", plugins.ContextError(ctx.Err()))
		f.enqueue(func(dead bool) {
			b.failUnreported(cerr)
			delete(f.active, b)
		})
		<-b.done // the cancel above, or teardown, reports every op
	}
	for i := range b.ops {
		if !b.ops[i].pre {
			results[i].Err = b.res[i]
		}
	}
	return nil
}

// localDesc is the descriptor ops pass for the local buffer: fi_mr_desc of
// the region when the provider wants FI_MR_LOCAL, else none.
func (f *fabric) localDesc(id uint64) (uintptr, error) {
	if f.info.MRMode&mrLocal == 0 {
		return 0, nil
	}
	f.mrMu.RLock()
	h := f.mrs[id]
	f.mrMu.RUnlock()
	if h == nil {
		return 0, fmt.Errorf("region %d has no memory registration: %w", id, plugins.ErrUnknownRegion)
	}
	return h.desc, nil
}

// registerMR registers mem as region id and returns its published key.
func (f *fabric) registerMR(ctx context.Context, id uint64, mem []byte) ([]byte, error) {
	var key []byte
	err := f.do(func() error {
		f.mrMu.RLock()
		_, dup := f.mrs[id]
		f.mrMu.RUnlock()
		if dup {
			return fmt.Errorf("efa: region %d already registered: %w", id, plugins.ErrInvalidArgument)
		}
		if len(f.statusFree) == 0 {
			return fmt.Errorf("efa: region %d: all %d status slots in use (transports.efa.max_regions): %w", id, f.opts.MaxRegions, plugins.ErrInvalidArgument)
		}
		h, k, err := f.register(fmt.Sprintf("region %d", id), mem, accessRegion)
		if err != nil {
			return err
		}
		slot := f.statusFree[len(f.statusFree)-1]
		f.statusFree = f.statusFree[:len(f.statusFree)-1]
		k.Slot = slot
		k.Token = f.tokenBase + f.nextKey
		if k.Token == 0 {
			k.Token = 1
		}
		f.status.setWord(slot, k.Token)
		f.regionSlots[id] = slot
		f.mrMu.Lock()
		f.mrs[id] = h
		f.mrMu.Unlock()
		key = k.marshal()
		return nil
	})
	return key, err
}

// deregisterMR clears region id's status slot and closes its registration.
func (f *fabric) deregisterMR(ctx context.Context, id uint64) error {
	return f.do(func() error {
		f.mrMu.Lock()
		h := f.mrs[id]
		delete(f.mrs, id)
		f.mrMu.Unlock()
		if h == nil {
			return fmt.Errorf("efa: region %d: %w", id, plugins.ErrUnknownRegion)
		}
		if slot, ok := f.regionSlots[id]; ok {
			f.status.setWord(slot, 0)
			f.statusFree = append(f.statusFree, slot)
			delete(f.regionSlots, id)
		}
		if rc := f.c.mrClose(h); rc != 0 {
			return fmt.Errorf("efa: closing the registration of region %d: %s (%s %d): %w", id, fiStrerror(rc), fiName(rc), rc, plugins.ErrInternal)
		}
		return nil
	})
}

// checkAddr validates a peer's address against ours before it goes to
// fi_av_insert, which trusts its length and format.
func (f *fabric) checkAddr(name string, ep endpoint) error {
	if ep.Provider != f.info.Provider || ep.AddrFormat != f.info.AddrFormat {
		return fmt.Errorf("efa: peer %q runs provider %q (address format %d) but this node runs %q (address format %d); both ends must use the same transports.efa.provider: %w",
			name, ep.Provider, ep.AddrFormat, f.info.Provider, f.info.AddrFormat, plugins.ErrNotSupported)
	}
	if f.info.AddrFormat == fiAddrStr {
		for _, r := range string(ep.Addr) {
			if r == 0 || r > unicode.MaxASCII || !unicode.IsPrint(r) {
				return fmt.Errorf("efa: peer %q address is not a printable string: %w", name, plugins.ErrInvalidArgument)
			}
		}
		return nil
	}
	if len(ep.Addr) != len(f.self) {
		return fmt.Errorf("efa: peer %q address is %d bytes, this provider's are %d: %w", name, len(ep.Addr), len(f.self), plugins.ErrInvalidArgument)
	}
	return nil
}

// connect puts the peer's address in the address vector (once per
// address) and maps its raw keys.
func (f *fabric) connect(ctx context.Context, name string, ep endpoint, p *peer) (*peerConn, error) {
	if err := f.checkAddr(name, ep); err != nil {
		return nil, err
	}
	slots := uint32(ep.Status.Size / 8)
	for _, r := range p.byAddr {
		if r.key.Slot >= slots || r.key.Token == 0 {
			return nil, fmt.Errorf("efa: peer %q region %d: status slot %d outside its table of %d: %w", name, r.id, r.key.Slot, slots, plugins.ErrProtocol)
		}
	}
	conn := &peerConn{name: name, status: ep.Status, statusRKey: ep.Status.Key}
	err := f.do(func() error {
		av := f.avs[string(ep.Addr)]
		if av == nil {
			addr, rc := f.c.avInsert(ep.Addr)
			if rc != 0 {
				return fmt.Errorf("efa: fi_av_insert of peer %q (%s): %s (%s %d): %w", name, f.c.straddr(ep.Addr), fiStrerror(rc), fiName(rc), rc, plugins.ErrPeerUnreachable)
			}
			av = &avEntry{key: string(ep.Addr), addr: addr}
			f.avs[av.key] = av
		}
		av.refs++
		conn.av = av
		mapRaw := func(what string, k regionKey) (uint64, error) {
			key, rc := f.c.mapRaw(k.Base, k.Raw)
			if rc != 0 {
				return 0, fmt.Errorf("efa: fi_mr_map_raw for peer %q %s: %s (%s %d): %w", name, what, fiStrerror(rc), fiName(rc), rc, plugins.ErrProtocol)
			}
			conn.rawKeys = append(conn.rawKeys, key)
			return key, nil
		}
		if ep.Status.Flags&keyFlagRaw != 0 {
			key, err := mapRaw("status table", ep.Status)
			if err != nil {
				f.releaseConn(conn)
				return err
			}
			conn.statusRKey = key
		}
		for _, r := range p.byAddr {
			if r.key.Flags&keyFlagRaw == 0 {
				continue
			}
			key, err := mapRaw(fmt.Sprintf("region %d", r.id), r.key)
			if err != nil {
				f.releaseConn(conn)
				return err
			}
			r.rkey = key
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return conn, nil
}

// releaseConn drops conn's hold on its address and raw keys (progress
// thread).
func (f *fabric) releaseConn(conn *peerConn) {
	if conn.released {
		return
	}
	conn.released = true
	for _, k := range conn.rawKeys {
		f.c.unmapKey(k)
	}
	conn.rawKeys = nil
	if av := conn.av; av != nil {
		av.refs--
		if av.refs == 0 && !av.dead {
			delete(f.avs, av.key)
			if rc := f.c.avRemove(av.addr); rc != 0 {
				f.log.Debug("efa: fi_av_remove", zap.String("peer", conn.name), zap.String("error", fiStrerror(rc)))
			}
		}
	}
}

// disconnect fails conn's ops and releases it once nothing of it is posted.
func (f *fabric) disconnect(ctx context.Context, conn *peerConn) error {
	err := f.do(func() error {
		conn.closed = true
		cerr := fmt.Errorf("efa: peer %s disconnected: %w", conn.name, plugins.ErrClosed)
		for b := range f.active {
			if b.conn == conn {
				b.failUnreported(cerr)
				delete(f.active, b)
			}
		}
		f.maybeRelease(conn)
		return nil
	})
	if err != nil && !errors.Is(err, plugins.ErrClosed) {
		return err
	}
	return nil
}

// localPeerClosed stops all use of addr, the address of a transport of
// this process that is closing: its ops fail, nothing more is posted to it
// and its address stays in the AV (removing it could touch the peer's
// memory too). It returns a channel closed once nothing posted to the peer
// is outstanding (nil if nothing is): the peer must not free its memory
// before, since completing those operations touches it.
func (f *fabric) localPeerClosed(addr, provider string) chan struct{} {
	if provider != f.info.Provider {
		return nil
	}
	av := f.avs[addr]
	if av == nil {
		return nil
	}
	av.dead = true
	for b := range f.active {
		if b.conn.av == av {
			b.failUnreported(fmt.Errorf("efa: peer %s closed: %w", b.conn.name, plugins.ErrPeerUnreachable))
			delete(f.active, b)
		}
	}
	for _, p := range f.probeQueue {
		if p.key.conn.av == av {
			p.notBefore = time.Time{} // resolved as failed by postProbes
		}
	}
	if av.posted == 0 {
		return nil
	}
	av.drained = make(chan struct{})
	return av.drained
}

// close stops the progress thread, which fails every op still in flight,
// waits (bounded) for posted operations to come back, and closes
// everything.
func (f *fabric) close(ctx context.Context) error {
	local.mu.Lock()
	_, open := local.m[f]
	delete(local.m, f)
	var others []*fabric
	for g := range local.m {
		others = append(others, g)
	}
	local.mu.Unlock()
	if open {
		for _, g := range others {
			var drained chan struct{}
			g.do(func() error { drained = g.localPeerClosed(string(f.self), f.info.Provider); return nil })
			if drained != nil {
				select {
				case <-drained:
				case <-time.After(drainTimeout):
					f.log.Warn("efa: a transport of this process still has operations posted to this one as it closes")
				}
			}
		}
	}
	deadline := time.Now().Add(drainTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	f.enqueue(func(dead bool) {
		f.stopping = true
		f.drainUntil = deadline
	})
	<-f.exited
	return f.closeErr
}

// livePosted counts posted contexts whose peer has not closed.
func (f *fabric) livePosted() int {
	n := 0
	for _, ref := range f.slots {
		switch {
		case ref.b != nil && !ref.b.conn.dead():
			n++
		case ref.pr != nil && !ref.pr.key.conn.dead():
			n++
		}
	}
	return n
}

// teardown runs on the progress thread when it stops.
func (f *fabric) teardown(slots []uint32) {
	closedErr := fmt.Errorf("efa: transport closed: %w", plugins.ErrClosed)
	for b := range f.active {
		b.failUnreported(closedErr)
	}
	f.active = map[*batch]struct{}{}
	f.pend = nil
	// Let posted operations come back before the endpoint goes: a peer
	// may still be reading or writing our memory for them.
	for f.livePosted() > 0 && time.Now().Before(f.drainUntil) {
		n, e := f.c.poll(slots)
		if f.handle(n, e, slots) == 0 {
			f.c.block(busySleep)
		}
	}
	var errs []string
	if rc := f.c.closeEP(); rc != 0 {
		errs = append(errs, fmt.Sprintf("fi_close(ep): %s", fiStrerror(rc)))
	}
	if f.posted > 0 {
		f.log.Warn("efa: closed the endpoint with operations still posted", zap.Int("posted", f.posted))
	}
	for i, ref := range f.slots {
		f.slots[i] = slotRef{}
		if ref.b != nil {
			ref.b.finishChunk(&ref.b.chunks[ref.c], closedErr)
		}
	}
	for _, p := range f.probes {
		for _, w := range p.chunks {
			w.b.finishChunk(&w.b.chunks[w.c], closedErr)
		}
	}
	f.probes = map[probeKey]*probe{}
	f.probeQueue = nil
	f.posted = 0
	f.mrMu.Lock()
	for id, h := range f.mrs {
		if rc := f.c.mrClose(h); rc != 0 {
			errs = append(errs, fmt.Sprintf("closing the registration of region %d: %s", id, fiStrerror(rc)))
		}
	}
	f.mrs = map[uint64]*mrHandle{}
	f.mrMu.Unlock()
	f.closeTables()
	f.mu.Lock()
	f.closed = true // no wake after this: the eventfd goes with c
	f.mu.Unlock()
	f.c.free()
	if len(errs) > 0 {
		f.closeErr = fmt.Errorf("efa: close: %s: %w", strings.Join(errs, "; "), plugins.ErrInternal)
	}
	f.runQueue(true)
}
