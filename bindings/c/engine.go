package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/kvconnect/kvconnect/config"
	"github.com/kvconnect/kvconnect/connector"
	"github.com/kvconnect/kvconnect/internal/logging"
	"github.com/kvconnect/kvconnect/internal/spin"
)

// engine is one kvc_engine: a shell until initialize brings a node up.
// Its methods are safe for concurrent use. mu guards the fields below it;
// it is held across initialize and close (so they are serialized) but
// never across a transfer.
type engine struct {
	id uint64

	starting atomic.Bool // initialize runs (node fails rather than waits)

	mu       sync.Mutex
	defaults config.Config // kvc_engine_set_defaults
	c        *connector.Connector
	closed   bool
	timeout  time.Duration // the node's transfer_timeout
	warnings []string      // the configuration's warnings, for the status

	regMu     sync.Mutex
	memory    map[uint64]*connector.Region // registered caller memory, by first byte
	managed   map[uint64]*connector.Region // managed buffers, by address
	batches   map[uint64]*batch
	nextBatch uint64
}

// batch is a submitted batch until it is freed.
type batch struct {
	b      *connector.Batch
	cancel context.CancelFunc
	n      int
}

func newEngine(id uint64) *engine {
	return &engine{id: id, memory: map[uint64]*connector.Region{}, managed: map[uint64]*connector.Region{}, batches: map[uint64]*batch{}}
}

// node returns the running node, or why there is none.
func (e *engine) node() (*connector.Connector, error) {
	if !e.mu.TryLock() {
		// A call made while the engine starts fails at once rather than
		// waiting out the start: the caller may hold a lock the start
		// needs (Python's GIL, kept by register_memory, while a thread of
		// the same process serves the metadata the start publishes).
		if e.starting.Load() {
			return nil, codeErr(codeNotInitialized, fmt.Errorf("kvconnect: engine %d is not initialized yet: its initialize is under way in another thread; wait for it to return", e.id))
		}
		e.mu.Lock()
	}
	defer e.mu.Unlock()
	switch {
	case e.closed:
		return nil, codeErr(codeClosed, fmt.Errorf("kvconnect: engine %d is closed", e.id))
	case e.c == nil:
		return nil, codeErr(codeNotInitialized, fmt.Errorf("kvconnect: engine %d is not initialized: call initialize first (and check its return code)", e.id))
	}
	return e.c, nil
}

// setDefaults parses a JSON object of configuration keys into the layer
// initialize starts from.
func (e *engine) setDefaults(text string) error {
	var d config.Config
	dec := json.NewDecoder(strings.NewReader(text))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		return codeErr(codeInvalidArgument, fmt.Errorf("kvconnect: engine defaults %q: %v: want a JSON object of configuration keys (docs/CONFIG.md), e.g. {\"plugin_dir\": \"/opt/kvconnect/bin\"}: %w", text, err, connector.ErrInvalidArgument))
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.defaults = d
	return nil
}

// Mooncake's RPC port range in P2P mode, and the variables that move it.
const (
	defaultMinRPCPort = 15000
	defaultMaxRPCPort = 17000
)

// initialize brings the node up as Mooncake's initialize_ext does. It may
// be called again after a failure.
func (e *engine) initialize(localHostname, metadataServer, protocol, deviceName, metadataType string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.starting.Store(true)
	defer e.starting.Store(false)
	if e.closed {
		return codeErr(codeClosed, fmt.Errorf("kvconnect: engine %d is closed", e.id))
	}
	if e.c != nil {
		return codeErr(codeInvalidArgument, fmt.Errorf("kvconnect: engine %d is already initialized (session %s): close it and create a new one to change its settings: %w", e.id, e.c.SessionID(), connector.ErrInvalidArgument))
	}
	h, err := parseHostname(localHostname)
	if err != nil {
		return codeErr(codeInvalidArgument, fmt.Errorf("kvconnect: initialize: %v: %w", err, connector.ErrInvalidArgument))
	}
	meta, err := connString(metadataServer, metadataType)
	if err != nil {
		return codeErr(codeInvalidArgument, fmt.Errorf("kvconnect: initialize: %v: %w", err, connector.ErrInvalidArgument))
	}
	base := e.defaults
	base.Hostname, base.Metadata, base.DeviceName = h.host, meta, deviceName
	base.Protocol = protocol
	if base.Protocol == "" {
		base.Protocol = "rdma" // Mooncake's default protocol
	}
	var opts []connector.Option
	if h.npu >= 0 {
		if base.Transports == nil {
			base.Transports = map[string]map[string]any{}
		}
		asc := map[string]any{"npu_id": h.npu}
		if h.port != 0 {
			asc["port"] = h.port
		}
		base.Transports["ascend"] = asc
	}
	if meta != config.MetadataP2P && h.host != "" {
		if h.port != 0 && h.npu < 0 {
			base.RPCPort = h.port // the segment is host:port: serve it there
		} else if h.npu < 0 {
			opts = append(opts, connector.WithSegmentName(h.host))
		}
	}
	// One view of the environment for the whole start: another thread's
	// kvc_sync_environ may run meanwhile (Python starts engines without
	// the GIL).
	env := environSnapshot()
	loaded, err := config.Load(config.Options{Base: &base, Environ: env, CallerEnv: rpcPortEnv})
	if err != nil {
		return codeErr(codeInvalidArgument, fmt.Errorf("kvconnect: initialize: %w", err))
	}
	cfg := loaded.Config
	if cfg.RPCPort == 0 {
		lo, hi, err := rpcPortRange(env)
		if err != nil {
			return codeErr(codeInvalidArgument, err)
		}
		opts = append(opts, connector.WithRPCPortRange(lo, hi))
	}
	level := loaded.LogLevel
	if src := loaded.Source("log_level"); src == "default" || (src == "env MC_LOG_LEVEL" && level != "debug") {
		// The Python package (or the C caller) reports what matters;
		// the node's own log is for those who ask for it. Mooncake's
		// MC_LOG_LEVEL (INFO in many SGLang scripts) tunes Mooncake's
		// own chatter: only its TRACE asks this library for more.
		level = "error"
	}
	log, err := logging.New(level, loaded.LogFormat)
	if err != nil {
		return codeErr(codeInvalidArgument, fmt.Errorf("kvconnect: initialize: %w", err))
	}
	opts = append(opts, connector.WithLogger(log.Named("kvconnect")))
	// New launches plugin processes bound to the thread that starts them
	// (they die with it): start them from a Go thread, which lives as
	// long as the process, never from the caller's thread.
	type result struct {
		c   *connector.Connector
		err error
	}
	done := make(chan result, 1)
	go func() {
		c, err := connector.New(context.Background(), cfg, opts...)
		done <- result{c, err}
	}()
	r := <-done
	if r.err != nil {
		log.Sync()
		return codeErr(codeOf(r.err), fmt.Errorf("kvconnect: initialize(%q, %q, %q, %q): %w", localHostname, metadataServer, protocol, deviceName, r.err))
	}
	e.c, e.timeout = r.c, cfg.TransferTimeout
	e.warnings = nil
	for _, w := range loaded.Warnings {
		e.warnings = append(e.warnings, w.Error()) // secrets are hidden in problems
	}
	return nil
}

// rpcPortEnv lists the variables rpcPortRange reads (config.Load is told
// not to call them unread).
var rpcPortEnv = []string{"MC_MIN_RPC_PORT", "MC_MAX_RPC_PORT", "MC_MIN_PRC_PORT", "MC_MAX_PRC_PORT"}

// rpcPortRange is MC_MIN_RPC_PORT..MC_MAX_RPC_PORT, Mooncake's P2P range,
// from env (KEY=VALUE). As in Mooncake, MC_MIN_PRC_PORT and
// MC_MAX_PRC_PORT (its old spelling) are read when the first spelling is
// unset.
func rpcPortRange(env []string) (int, int, error) {
	lookup := func(name string) string {
		for i := len(env) - 1; i >= 0; i-- {
			if k, v, ok := strings.Cut(env[i], "="); ok && k == name {
				return v
			}
		}
		return ""
	}
	get := func(name, old string, def int) (int, string, error) {
		v := lookup(name)
		if v == "" {
			if v = lookup(old); v != "" {
				name = old
			}
		}
		if v == "" {
			return def, fmt.Sprintf("%d (the default of %s)", def, name), nil
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 65535 {
			return 0, "", fmt.Errorf("kvconnect: %s=%q (environment): want a port number 1-65535: %w", name, v, connector.ErrInvalidArgument)
		}
		return n, fmt.Sprintf("%d (environment %s)", n, name), nil
	}
	lo, loText, err := get("MC_MIN_RPC_PORT", "MC_MIN_PRC_PORT", defaultMinRPCPort)
	if err != nil {
		return 0, 0, err
	}
	hi, hiText, err := get("MC_MAX_RPC_PORT", "MC_MAX_PRC_PORT", defaultMaxRPCPort)
	if err != nil {
		return 0, 0, err
	}
	if lo > hi {
		return 0, 0, fmt.Errorf("kvconnect: the RPC port range is empty: its low end %s is above its high end %s: %w", loText, hiText, connector.ErrInvalidArgument)
	}
	return lo, hi, nil
}

// close stops the node. Batches still running are canceled.
func (e *engine) close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil
	}
	e.regMu.Lock()
	e.closed = true // under both locks: submit reads it under regMu
	for id, b := range e.batches {
		b.cancel()
		delete(e.batches, id)
	}
	e.regMu.Unlock()
	if e.c == nil {
		return nil
	}
	err := e.c.Close()
	e.regMu.Lock()
	clear(e.memory)
	clear(e.managed)
	e.regMu.Unlock()
	if err != nil {
		return codeErr(codeOf(err), fmt.Errorf("kvconnect: close: %w", err))
	}
	return nil
}

// bytesAt is the caller's memory [addr, addr+n) (not Go's).
func bytesAt(addr, n uint64) []byte {
	return unsafe.Slice((*byte)(*(*unsafe.Pointer)(unsafe.Pointer(&addr))), n)
}

func (e *engine) register(addrs, lens []uint64) error {
	c, err := e.node()
	if err != nil {
		return err
	}
	mems := make([][]byte, len(addrs))
	for i := range addrs {
		if addrs[i] == 0 || lens[i] == 0 || addrs[i]+lens[i] < addrs[i] || lens[i] > connector.MaxRegionSize {
			return codeErr(codeInvalidArgument, fmt.Errorf("kvconnect: register memory: buffer %d of %d: address 0x%x, length %d: want a non-null address and a length between 1 byte and %d: %w", i+1, len(addrs), addrs[i], lens[i], uint64(connector.MaxRegionSize), connector.ErrInvalidArgument))
		}
		mems[i] = bytesAt(addrs[i], lens[i])
	}
	ctx, cancel := context.WithTimeout(context.Background(), e.timeout)
	defer cancel()
	regions, err := c.RegisterMemoryBatch(ctx, mems)
	if err != nil {
		return codeErr(codeOf(err), err)
	}
	e.regMu.Lock()
	for _, r := range regions {
		e.memory[r.Addr()] = r
	}
	e.regMu.Unlock()
	return nil
}

// unregister frees the caller memory registered at each address: all of
// them, or (when one is unknown) none.
func (e *engine) unregister(addrs []uint64) error {
	if _, err := e.node(); err != nil {
		return err
	}
	e.regMu.Lock()
	regions := make([]*connector.Region, len(addrs))
	for i, a := range addrs {
		r := e.memory[a]
		if r == nil {
			e.regMu.Unlock()
			return codeErr(codeNotRegistered, fmt.Errorf("kvconnect: unregister memory: 0x%x is not the address of registered memory (pass the address given to register_memory; unregistered already?): %w", a, connector.ErrUnknownRegion))
		}
		regions[i] = r
	}
	for _, a := range addrs {
		delete(e.memory, a)
	}
	e.regMu.Unlock()
	// One bound for the call (the header's rule), not one per region: a
	// caller unregistering many regions still in use waits transfer_timeout,
	// not that many times over (holding the fork lock, and Python's GIL).
	ctx, cancel := context.WithTimeout(context.Background(), e.timeout)
	defer cancel()
	var errs []error
	for i, r := range regions {
		if err := r.Free(ctx); err != nil {
			errs = append(errs, err)
			e.keep(e.memory, addrs[i], r)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return codeErr(codeOf(err), fmt.Errorf("kvconnect: unregister memory: %w (what could not be freed stays registered: unregister it again once the transfers on it end)", err))
	}
	return nil
}

// keep puts back a region whose Free failed (transfers still use it: it
// stays mapped and shared), so that a later call can free it and a
// forked child still gets its private copy.
func (e *engine) keep(table map[uint64]*connector.Region, addr uint64, r *connector.Region) {
	e.regMu.Lock()
	defer e.regMu.Unlock()
	if _, taken := table[addr]; !taken {
		table[addr] = r
	}
}

func (e *engine) allocate(n uint64) (uint64, error) {
	c, err := e.node()
	if err != nil {
		return 0, err
	}
	if n == 0 || n > connector.MaxRegionSize {
		return 0, codeErr(codeInvalidArgument, fmt.Errorf("kvconnect: allocate managed buffer of %d bytes: want 1 byte to 1 TiB: %w", n, connector.ErrInvalidArgument))
	}
	ctx, cancel := context.WithTimeout(context.Background(), e.timeout)
	defer cancel()
	r, err := c.Alloc(ctx, int(n))
	if err != nil {
		return 0, codeErr(codeOf(err), err)
	}
	e.regMu.Lock()
	e.managed[r.Addr()] = r
	e.regMu.Unlock()
	return r.Addr(), nil
}

func (e *engine) freeManaged(addr uint64) error {
	if _, err := e.node(); err != nil {
		return err
	}
	e.regMu.Lock()
	r := e.managed[addr]
	delete(e.managed, addr)
	e.regMu.Unlock()
	if r == nil {
		return codeErr(codeNotRegistered, fmt.Errorf("kvconnect: free managed buffer: 0x%x is not the address of a managed buffer of this engine: %w", addr, connector.ErrUnknownRegion))
	}
	ctx, cancel := context.WithTimeout(context.Background(), e.timeout)
	defer cancel()
	if err := r.Free(ctx); err != nil {
		e.keep(e.managed, addr, r)
		return codeErr(codeOf(err), fmt.Errorf("kvconnect: free managed buffer: %w (it stays allocated: free it again once the transfers on it end)", err))
	}
	return nil
}

// callTimeout is the context for a call bounded by ms (< 0: def).
func callTimeout(ms int64, def time.Duration) (context.Context, context.CancelFunc) {
	d := def
	if ms >= 0 {
		d = millis(ms)
	}
	return context.WithTimeout(context.Background(), d)
}

// millis is ms milliseconds (ms >= 0), at most what a Duration holds:
// INT64_MAX, a C caller's "wait forever", must not wrap to a negative
// duration (an immediate timeout).
func millis(ms int64) time.Duration {
	if ms > math.MaxInt64/int64(time.Millisecond) {
		return math.MaxInt64
	}
	return time.Duration(ms) * time.Millisecond
}

// transferTimeout is Mooncake's bound on a transfer: transfer_timeout
// plus 1 ns per byte, unless the caller gave one.
func (e *engine) transferTimeout(ms int64, lens []uint64) time.Duration {
	if ms >= 0 {
		return millis(ms)
	}
	d := e.timeout
	for _, n := range lens {
		d += time.Duration(n)
	}
	return d
}

func (e *engine) open(session string, ms int64) (*connector.Peer, error) {
	c, err := e.node()
	if err != nil {
		return nil, err
	}
	ctx, cancel := callTimeout(ms, 0)
	if ms < 0 {
		cancel()
		ctx, cancel = context.WithCancel(context.Background()) // connect_timeout bounds it
	}
	defer cancel()
	p, err := c.Open(ctx, session)
	if err != nil {
		return nil, codeErr(codeOf(err), err)
	}
	return p, nil
}

func (e *engine) firstBuffer(session string, ms int64) (uint64, error) {
	p, err := e.open(session, ms)
	if err != nil {
		return 0, err
	}
	rs := p.Regions()
	if len(rs) == 0 {
		// Opened before the peer registered anything: fetch its
		// segment again (a peer's regions are read when it is opened).
		ctx, cancel := callTimeout(ms, time.Minute)
		defer cancel()
		p.Close(ctx)
		if p, err = e.open(session, ms); err != nil {
			return 0, err
		}
		rs = p.Regions()
	}
	if len(rs) == 0 {
		return 0, codeErr(codeNotRegistered, fmt.Errorf("kvconnect: segment %s has no buffers registered: %w", session, connector.ErrUnknownRegion))
	}
	return rs[0].Addr, nil
}

func (e *engine) probe(session string, ms int64) error {
	c, err := e.node()
	if err != nil {
		return err
	}
	ctx, cancel := callTimeout(ms, time.Hour)
	defer cancel()
	if err := c.Probe(ctx, session); err != nil {
		return codeErr(codeOf(err), err)
	}
	return nil
}

func (e *engine) notify(session, name, msg string, ms int64) error {
	c, err := e.node()
	if err != nil {
		return err
	}
	ctx, cancel := callTimeout(ms, e.timeout)
	defer cancel()
	if err := c.Notify(ctx, session, name, msg); err != nil {
		return codeErr(codeOf(err), err)
	}
	return nil
}

// notifies drains the notifications received so far.
func (e *engine) notifies() ([]connector.Notification, error) {
	c, err := e.node()
	if err != nil {
		return nil, err
	}
	out := []connector.Notification{}
	for {
		select {
		case n, ok := <-c.Notifications():
			if !ok {
				return out, nil
			}
			out = append(out, n)
		default:
			return out, nil
		}
	}
}

// lockedCaller is the context of a sync transfer: its goroutine is a
// call from C, locked to the caller's thread, so whatever waits for the
// batch on it must not yield (spin.WithoutYield). Made once: it never
// ends, and each call derives its deadline from it.
var lockedCaller = spin.WithoutYield(context.Background())

func (e *engine) transferSync(session string, op int, local, remote, lens []uint64, ms int64) error {
	c, err := e.node()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(lockedCaller, e.transferTimeout(ms, lens))
	defer cancel()
	if err := c.BatchTransferSync(ctx, connector.OpKind(op), session, local, remote, lens); err != nil {
		return codeErr(codeOf(err), err)
	}
	return nil
}

func (e *engine) submit(session string, op int, local, remote, lens []uint64, ms int64) (uint64, error) {
	c, err := e.node()
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), e.transferTimeout(ms, lens))
	b, err := c.SubmitAddrs(ctx, connector.OpKind(op), session, local, remote, lens)
	if err != nil {
		cancel()
		return 0, codeErr(codeOf(err), err)
	}
	go func() { <-b.Done(); cancel() }()
	e.regMu.Lock()
	defer e.regMu.Unlock()
	if e.closed {
		cancel()
		return 0, codeErr(codeClosed, fmt.Errorf("kvconnect: engine %d is closed", e.id))
	}
	e.nextBatch++
	e.batches[e.nextBatch] = &batch{b: b, cancel: cancel, n: len(lens)}
	return e.nextBatch, nil
}

func (e *engine) batch(id uint64) (*batch, error) {
	e.regMu.Lock()
	defer e.regMu.Unlock()
	b := e.batches[id]
	if b == nil && e.closed {
		// close canceled and forgot every batch
		return nil, codeErr(codeClosed, fmt.Errorf("kvconnect: batch %d: engine %d is closed: %w", id, e.id, connector.ErrClosed))
	}
	if b == nil {
		return nil, codeErr(codeUnknownBatch, fmt.Errorf("kvconnect: batch %d: no such batch (never submitted, or freed already): %w", id, connector.ErrInvalidArgument))
	}
	return b, nil
}

// Batch outcomes, as Mooncake's transfer_check_status.
const (
	batchDone     = 1
	batchPending  = 0
	batchFailed   = -1
	batchTimedOut = -2
)

// wait waits up to ms for batch id and reports its outcome and each op's
// status. ended: the batch ended (err, if any, says why it failed); not
// ended with an error: it could not be looked at.
func (e *engine) wait(id uint64, ms int64, statuses []int32) (outcome int, ended bool, _ error) {
	b, err := e.batch(id)
	if err != nil {
		return 0, false, err
	}
	if d := e.waitBound(ms); d != 0 {
		t := time.NewTimer(d)
		select {
		case <-b.b.Done():
		case <-t.C:
		}
		t.Stop()
	}
	select {
	case <-b.b.Done():
	default:
		for i := range statuses {
			statuses[i] = int32(connector.StatusPending)
		}
		return batchPending, false, nil
	}
	outcome = batchDone
	for i := 0; i < b.n; i++ {
		st := b.b.Status(i)
		if i < len(statuses) {
			statuses[i] = int32(st)
		}
		switch st {
		case connector.StatusTimeout:
			if outcome == batchDone {
				outcome = batchTimedOut
			}
		case connector.StatusCompleted:
		default:
			outcome = batchFailed
		}
	}
	if err := b.b.Err(); err != nil {
		if outcome == batchDone {
			outcome = batchFailed // every op completed, but the batch as a whole failed
		}
		return outcome, true, codeErr(codeOf(err), err)
	}
	return outcome, true, nil
}

// waitBound is how long kvc_batch_wait waits: ms, or transfer_timeout
// when ms < 0 (the header's rule for every timeout_ms).
func (e *engine) waitBound(ms int64) time.Duration {
	if ms < 0 {
		return e.timeout
	}
	return millis(ms)
}

// free forgets batch id, canceling it first if it still runs.
func (e *engine) free(id uint64) error {
	e.regMu.Lock()
	b := e.batches[id]
	delete(e.batches, id)
	closed := e.closed
	e.regMu.Unlock()
	if b == nil && closed {
		return codeErr(codeClosed, fmt.Errorf("kvconnect: batch %d: engine %d is closed: %w", id, e.id, connector.ErrClosed))
	}
	if b == nil {
		return codeErr(codeUnknownBatch, fmt.Errorf("kvconnect: batch %d: no such batch (never submitted, or freed already): %w", id, connector.ErrInvalidArgument))
	}
	b.cancel()
	<-b.b.Done()
	return nil
}

// status is the node's status and the configuration's warnings.
func (e *engine) status() (connector.Status, []string, error) {
	c, err := e.node()
	if err != nil {
		return connector.Status{}, nil, err
	}
	e.mu.Lock()
	w := e.warnings
	e.mu.Unlock()
	return c.Status(), w, nil
}
