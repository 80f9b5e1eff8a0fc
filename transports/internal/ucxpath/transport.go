// Package ucxpath is the UCX data path the ucx and rdma transports share:
// one-sided PUT and GET
// (ucp_put_nbx / ucp_get_nbx) into peers' registered memory over whatever
// lanes UCX selects: shared memory (posix, sysv, cma) between processes of
// one host, tcp between hosts, and RDMA (rc, ud, dc) where a NIC exists.
//
// # Threads
//
// All UCX calls of a transport happen on one goroutine locked to its OS
// thread (the progress loop; the UCP worker is UCS_THREAD_MODE_SINGLE). The
// loop drives ucp_worker_progress and, when idle, sleeps on the worker's
// event fd (ucp_worker_arm + epoll) together with an eventfd that API calls
// use to wake it, so an idle node does not spin and a node whose user code
// is idle still serves the RMA that UCX's tcp lanes emulate with active
// messages. API methods reach the loop through a command queue. Per-op
// state lives in Go, in a table of slots; the slot number is what travels
// through C as the request's user data, and completions come back as
// (slot, status) pairs queued in C: no Go pointer is kept by C and C never
// calls into Go.
//
// # Memory safety
//
// With one-sided RMA the memory owner cannot refuse an access, and over
// UCX's tcp and cma lanes nothing rejects a write to an address the owner
// has unmapped. So the initiator checks every op against the peer's
// published regions (the rkey covers only the registered range), and the
// owner deregisters a region, or closes, only after every peer that
// connected to it acknowledged a revoke message (sent as a UCP active
// message; the peer flushes its endpoint before it acknowledges). A peer
// that does not acknowledge within op_timeout makes DeregisterRegion fail
// with ErrTimeout, and the region stays registered with UCX until Close.
//
// A Variant names the transport and customises its lanes: the ucx
// transport runs every lane UCX selects, the rdma transport RDMA lanes
// only, with a check that UCX selected one.
package ucxpath

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"go.uber.org/zap"

	ucxlib "github.com/kvconnect/kvconnect/internal/ucx"
	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/plugins/regions"
)

var _ plugins.Transport = (*Transport)(nil)

// Variant customises the transport for a kind of lanes: the rdma transport
// is the ucx transport with RDMA lanes and a check that one was selected.
type Variant struct {
	// Name is the transport's name (error prefix, option keys, Info).
	Name string
	// Version is the transport implementation's version (Info).
	Version string
	// DefaultTLS is used when the tls option is empty ("" = UCX's default).
	DefaultTLS string
	// Require, if set, checks the resources the UCX context selected;
	// an error fails Init at StepProbeDevices (wrap ErrUnavailable).
	Require func(selected []ucxlib.Resource) error
}

// RDMALanes is the lane list of an RDMA-only variant: UCX's rc and ud
// aliases cover both verbs and mlx5 (add dc in the tls option for DC on
// mlx5).
const RDMALanes = "rc,ud"

// RequireRDMA is a Variant.Require for an RDMA-only variant (the rdma
// transport): it fails, wrapping ErrUnavailable, unless UCX selected at
// least one RDMA lane (rc, ud or dc, over verbs or mlx5).
func RequireRDMA(selected []ucxlib.Resource) error {
	for _, r := range selected {
		if r.IsRDMA() {
			return nil
		}
	}
	return fmt.Errorf("UCX selected no RDMA lane (%s): %w", resourceList(selected), plugins.ErrUnavailable)
}

// Transport is the UCX transport. The zero value is not usable; call New.
type Transport struct {
	v       Variant
	guard   plugins.Guard
	mu      sync.Mutex
	opts    Options
	log     *zap.Logger
	lp      *loop
	caps    plugins.Capability
	peers   map[plugins.PeerID]*peer
	nextID  plugins.PeerID
	regions regions.Table
	summary string
	lanes   []ucxlib.Resource
}

// New returns a UCX data path customised by v. It does nothing until
// Init.
func New(v Variant) *Transport {
	if v.Name == "" {
		v.Name = "ucx"
	}
	return &Transport{v: v, log: zap.NewNop(), peers: map[plugins.PeerID]*peer{},
		caps: plugins.CapRead | plugins.CapWrite | plugins.CapAbsoluteAddress}
}

// Info describes the transport. After Init it reports CapSameHostOnly when
// every lane UCX selected is shared memory.
func (t *Transport) Info(ctx context.Context) (plugins.Info, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return plugins.Info{Name: t.v.Name, Version: t.v.Version, APIVersion: plugins.APIVersion, Capabilities: t.caps}, nil
}

// Resources are the transports/devices the UCX context uses (after Init).
func (t *Transport) Resources() []ucxlib.Resource {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]ucxlib.Resource(nil), t.lanes...)
}

// Lanes are the lanes UCX selected for a connected peer.
func (t *Transport) Lanes(id plugins.PeerID) ([]ucxlib.Lane, error) {
	p, l, err := t.peer(id)
	if err != nil {
		return nil, err
	}
	var lanes []ucxlib.Lane
	err = l.call(func() error {
		if err := p.conn.usable(); err != nil {
			return fmt.Errorf("%s: peer %s: %w", t.v.Name, p.name, err)
		}
		lanes = l.w.Lanes(p.conn.ep)
		return nil
	})
	return lanes, err
}

func (t *Transport) initError(step, cause string, err error) *plugins.InitError {
	return &plugins.InitError{Transport: t.v.Name, Step: step, Cause: cause, Err: err}
}

// Init loads UCX, creates the UCP context and worker with the configured
// lanes and starts the progress loop.
func (t *Transport) Init(ctx context.Context, req plugins.InitRequest) (plugins.InitResult, error) {
	name := t.v.Name
	opts, err := CheckOptions(name, req.Options)
	if err != nil {
		return plugins.InitResult{}, t.initError(plugins.StepConfigure, err.Error(), err)
	}
	if err := t.guard.BeginInit(name); err != nil {
		return plugins.InitResult{}, err
	}
	if req.Logger != nil {
		t.log = req.Logger
	}
	lp, tls, netdev, err := t.start(opts, req.DeviceName)
	if err != nil {
		t.guard.EndInit(name, false)
		return plugins.InitResult{}, err
	}
	ep := endpoint{sharedMemoryOnly: lp.sharedMemoryOnly, where: lp.here, worker: lp.address}
	show := func(s string) string {
		if s == "" {
			return "default"
		}
		return s
	}
	summary := fmt.Sprintf("%s (UCX %s) tls=%s net_devices=%s lanes=%s worker address %d bytes",
		name, ucxlib.Version(), show(tls), show(netdev), resourceList(lp.resources), len(lp.address))
	t.mu.Lock()
	if err := t.guard.EndInit(name, true); err != nil {
		t.mu.Unlock()
		lp.shutdown(context.Background()) // Close came while Init ran
		return plugins.InitResult{}, err
	}
	t.opts = opts
	t.lp = lp
	t.lanes = lp.resources
	if lp.sharedMemoryOnly {
		t.caps |= plugins.CapSameHostOnly
	}
	t.summary = summary
	t.mu.Unlock()
	t.log.Info(name+" transport up", zap.String("ucx", ucxlib.Version()), zap.String("tls", show(tls)),
		zap.String("net_devices", show(netdev)), zap.String("lanes", resourceList(lp.resources)),
		zap.String("thread_mode", opts.ThreadMode), zap.String("error_mode", opts.ErrorMode))
	return plugins.InitResult{Endpoint: ep.encode(), Summary: summary}, nil
}

// start loads UCX and starts the progress loop with the lanes opts and
// deviceName ask for, checking that UCX selected lanes the variant
// accepts. It returns the loop and the tls and net_devices it used.
func (t *Transport) start(opts Options, deviceName string) (lp *loop, tls, netdev string, err error) {
	name := t.v.Name
	if err := ucxlib.Load(); err != nil {
		ie := t.initError(plugins.StepLoadLibrary, err.Error(), err)
		ie.NativeName = "dlopen"
		var le *ucxlib.LoadError
		if errors.As(err, &le) {
			ie.Hints = le.Hints
		}
		return nil, "", "", ie
	}
	if len(opts.UCXConfig) > 0 {
		all, ucp := ucxlib.ConfigKeys()
		if err := opts.checkUCXConfig(name, all, ucp); err != nil {
			return nil, "", "", t.initError(plugins.StepConfigure, err.Error(), err)
		}
	}
	tls = opts.TLS
	if tls == "" {
		tls = t.v.DefaultTLS
	}
	netdev = opts.NetDevices
	if netdev == "" {
		netdev = NetDevicesFromDeviceName(deviceName)
	}
	mode, _ := ucxlib.ParseThreadMode(opts.ThreadMode)
	cfg := ucxlib.Config{TLS: tls, NetDevices: netdev, Extra: opts.ucxConfig(tls), ThreadMode: mode, Slots: opts.MaxInflight + ctlSlots}
	lp, err = startLoop(t.v.Name, opts, t.log, cfg)
	if err != nil {
		return nil, "", "", t.workerError(err, tls, netdev)
	}
	fail := func(ie *plugins.InitError) (*loop, string, string, error) {
		lp.shutdown(context.Background())
		return nil, "", "", ie
	}
	if len(lp.resources) == 0 {
		return fail(t.initError(plugins.StepProbeDevices, "UCX selected no transport", fmt.Errorf("%s: no UCX transport selected: %w", name, plugins.ErrUnavailable)))
	}
	if ie := t.netDevicesUnused(tls, netdev, deviceName, opts.NetDevices != "", lp.resources); ie != nil {
		return fail(ie)
	}
	if t.v.Require != nil {
		if err := t.v.Require(lp.resources); err != nil {
			ie := t.initError(plugins.StepProbeDevices, fmt.Sprintf("%v (UCX selected %s)", err, resourceList(lp.resources)), err)
			if !errors.Is(err, plugins.ErrUnavailable) {
				ie.Err = fmt.Errorf("%w: %w", plugins.ErrUnavailable, err)
			}
			return fail(ie)
		}
	}
	return lp, tls, netdev, nil
}

// netDevicesUnused diagnoses network devices asked for (net_devices, or
// device_name) of which UCX could use none: UCX only warns on its stderr
// and starts with the shared-memory lanes, so the transport would come up
// reaching this host only, and fail every peer elsewhere without naming
// the device. Lanes that are all shared memory by choice (tls) are not
// checked.
func (t *Transport) netDevicesUnused(tls, netdev, deviceName string, explicit bool, rs []ucxlib.Resource) *plugins.InitError {
	if netdev == "" || netdev == "all" || sharedMemoryOnly(tls) {
		return nil
	}
	for _, r := range rs {
		if !r.IsSharedMemory() {
			return nil
		}
	}
	from := fmt.Sprintf("device_name %q", deviceName)
	if explicit {
		from = fmt.Sprintf("transports.%s.net_devices", t.v.Name)
	}
	have := "unknown"
	if res, err := ucxlib.Available(); err == nil {
		var net []string
		for _, r := range res {
			if !r.IsSharedMemory() && !slices.Contains(net, r.Device) {
				net = append(net, r.Device)
			}
		}
		have = strings.Join(net, ", ")
	}
	ie := t.initError(plugins.StepProbeDevices,
		fmt.Sprintf("UCX can use none of the network devices asked for (net_devices %q, from %s): it would start with shared-memory lanes only (UCX selected %s), reaching no other host; network devices on this host: %s",
			netdev, from, resourceList(rs), have),
		fmt.Errorf("%s: no usable network device among %q: %w", t.v.Name, netdev, plugins.ErrUnavailable))
	ie.Hints = []string{
		fmt.Sprintf("set device_name (or transports.%s.net_devices) to a device listed above, or to all", t.v.Name),
		"`ucx_info -d` (Debian package ucx-utils) lists what UCX sees",
	}
	return ie
}

// sharedMemoryOnly reports whether a tls list selects shared-memory lanes
// only (sm, posix, cma, ...).
func sharedMemoryOnly(tls string) bool {
	if tls == "" || strings.HasPrefix(tls, "^") {
		return false
	}
	for _, x := range strings.Split(tls, ",") {
		x = strings.TrimSpace(x)
		if x != "sm" && x != "shm" && !slices.Contains(ucxlib.SharedMemoryTransports, x) {
			return false
		}
	}
	return true
}

func resourceList(rs []ucxlib.Resource) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = r.String()
	}
	return strings.Join(s, ",")
}

// workerError turns a failure to create the UCP context into a diagnosis.
func (t *Transport) workerError(err error, tls, netdev string) error {
	var ce *ucxlib.CreateError
	if !errors.As(err, &ce) {
		return t.initError(plugins.StepOpenDevice, err.Error(), fmt.Errorf("%w: %w", plugins.ErrUnavailable, err))
	}
	if ce.Config {
		ie := t.initError(plugins.StepConfigure, fmt.Sprintf("UCX rejected the configuration (%s): %s; check transports.%s.tls, net_devices and ucx_config",
			ce.Step, ce.Text, t.v.Name), fmt.Errorf("%w: %w", plugins.ErrInvalidArgument, err))
		ie.NativeCode, ie.NativeName = int64(ce.Status), ce.Status.Name()
		return ie
	}
	ie := t.initError(plugins.StepOpenDevice, "", fmt.Errorf("%w: %w", plugins.ErrUnavailable, err))
	ie.NativeCode, ie.NativeName = int64(ce.Status), ce.Status.Name()
	have := "unknown"
	if res, aerr := ucxlib.Available(); aerr == nil {
		have = resourceList(res)
	}
	if ce.Status == ucxlib.ErrNoDevice {
		ie.Step = plugins.StepProbeDevices
		ie.Cause = fmt.Sprintf("UCX found no usable transport for tls=%q net_devices=%q (UCX %s: %s); this host offers %s",
			tls, netdev, ce.Step, ce.Text, have)
		ie.Hints = []string{
			fmt.Sprintf("set transports.%s.tls to transports listed above (or leave it empty for all)", t.v.Name),
			fmt.Sprintf("set transports.%s.net_devices (or device_name) to devices listed above, or to all", t.v.Name),
			"`ucx_info -d` (Debian package ucx-utils) lists what UCX sees",
		}
		return ie
	}
	ie.Cause = fmt.Sprintf("UCX %s failed: %s (tls=%q net_devices=%q)", ce.Step, ce.Text, tls, netdev)
	return ie
}

func (t *Transport) loop() (*loop, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.guard.Up(t.v.Name); err != nil {
		return nil, err
	}
	return t.lp, nil
}

func randomToken() uint64 {
	var b [8]byte
	for {
		rand.Read(b[:]) // never fails (Go 1.24+ crashes instead)
		if v := binary.LittleEndian.Uint64(b[:]); v != 0 {
			return v
		}
	}
}

// RegisterRegion registers r's memory with UCX (ucp_mem_map, no
// allocation) and returns its key: the packed rkey and the address UCX
// must be given for it.
func (t *Transport) RegisterRegion(ctx context.Context, r plugins.Region) ([]byte, error) {
	l, err := t.loop()
	if err != nil {
		return nil, err
	}
	if len(r.Mem) == 0 {
		return nil, fmt.Errorf("%s: register region %d: empty: %w", t.v.Name, r.ID, plugins.ErrInvalidArgument)
	}
	if err := t.regions.Add(uint64(r.ID), r.Addr, r.Mem); err != nil {
		return nil, fmt.Errorf("%s: register: %w", t.v.Name, err)
	}
	va := uintptr(unsafe.Pointer(&r.Mem[0]))
	lm := &localMem{id: r.ID, token: randomToken(), va: va, size: uint64(len(r.Mem))}
	var key []byte
	err = l.call(func() error {
		m, err := l.w.MemMap(va, lm.size)
		if err != nil {
			return fmt.Errorf("%s: register region %d (%d bytes): %w", t.v.Name, r.ID, lm.size, err)
		}
		packed, err := l.w.PackRkey(m)
		if err != nil {
			l.w.MemUnmap(m)
			return fmt.Errorf("%s: register region %d: %w", t.v.Name, r.ID, err)
		}
		lm.memh = m
		l.mems[r.ID] = lm
		key = regionKey{token: lm.token, va: uint64(va), length: lm.size, rkey: packed}.encode()
		return nil
	})
	if err != nil {
		t.regions.Remove(context.Background(), uint64(r.ID))
		return nil, err
	}
	return key, nil
}

// DeregisterRegion waits for local ops on the region, revokes it at every
// peer that connected to this node and waits for their acknowledgements,
// then unmaps it from UCX.
func (t *Transport) DeregisterRegion(ctx context.Context, id plugins.RegionID) error {
	l, err := t.loop()
	if err != nil {
		return err
	}
	if err := t.regions.Remove(ctx, uint64(id)); err != nil {
		return fmt.Errorf("%s: deregister: %w", t.v.Name, err)
	}
	var rv *revocation
	var lm *localMem
	deadline := time.Now().Add(time.Duration(t.opts.OpTimeout))
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	err = l.call(func() error {
		lm = l.mems[id]
		if lm == nil {
			return fmt.Errorf("%s: deregister region %d: %w", t.v.Name, id, plugins.ErrUnknownRegion)
		}
		delete(l.mems, id)
		// The revocation owns lm now: it unmaps it, or keeps it for
		// Close (revocation.lm).
		rv = l.startRevoke([]liveRegion{{id: id, token: lm.token}}, revokeDeregistered, deadline, nil, lm)
		return nil
	})
	if err != nil {
		return err
	}
	select {
	case err = <-rv.done:
	case <-ctx.Done():
		cerr := plugins.ContextError(ctx.Err())
		l.call(func() error { l.abandonRevoke(rv, cerr); return nil })
		select {
		case err = <-rv.done: // its outcome, or cerr
		default:
			err = cerr // the loop stopped: Close finishes it
		}
	}
	if err != nil {
		return fmt.Errorf("%s: deregister region %d: peers did not acknowledge its revocation: %w", t.v.Name, id, err)
	}
	if rv.unmapErr != nil {
		return fmt.Errorf("%s: deregister region %d: %w", t.v.Name, id, rv.unmapErr)
	}
	return nil
}

// Connect opens a peer: an endpoint to its worker address, its regions'
// rkeys unpacked, and a hello/welcome round trip that proves the peer
// answers and tells which of the descriptor's regions are still live.
func (t *Transport) Connect(ctx context.Context, info plugins.PeerInfo) (plugins.PeerID, error) {
	name := t.v.Name
	l, err := t.loop()
	if err != nil {
		return 0, err
	}
	ep, err := decodeEndpoint(info.Endpoint)
	if err != nil {
		return 0, fmt.Errorf("%s: peer %q: %w", name, info.Name, err)
	}
	rt, err := newRemoteTable(info.Regions)
	if err != nil {
		return 0, fmt.Errorf("%s: peer %q: %w", name, info.Name, err)
	}
	if l.sharedMemoryOnly && !l.here.sameHost(ep.where) {
		return 0, fmt.Errorf("%s: peer %q is on another host and this node's lanes (%s) are shared memory only: %w",
			name, info.Name, resourceList(l.resources), plugins.ErrPeerUnreachable)
	}
	p := &peer{name: info.Name, client: randomToken(), remote: rt, where: ep.where, welcome: make(chan error, 1)}
	if err := l.call(func() error { return l.openPeer(p, ep.worker) }); err != nil {
		return 0, err
	}
	timer := time.NewTimer(time.Duration(t.opts.ConnectTimeout))
	defer timer.Stop()
	select {
	case err = <-p.welcome:
	case <-timer.C:
		err = fmt.Errorf("%s: peer %q did not answer within connect_timeout %v: %w", name, info.Name, time.Duration(t.opts.ConnectTimeout), plugins.ErrPeerUnreachable)
	case <-ctx.Done():
		err = fmt.Errorf("%s: connecting to %q: %w", name, info.Name, plugins.ContextError(ctx.Err()))
	}
	if err != nil {
		l.call(func() error { l.teardownPeer(p, err); return nil })
		return 0, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.guard.Up(name); err != nil {
		l.call(func() error { l.teardownPeer(p, err); return nil })
		return 0, err
	}
	t.nextID++
	p.id = t.nextID
	t.peers[p.id] = p
	return p.id, nil
}

// Disconnect closes a peer: ops in flight to it fail with ErrClosed (or
// complete, on lanes that flush them on close).
func (t *Transport) Disconnect(ctx context.Context, id plugins.PeerID) error {
	t.mu.Lock()
	if err := t.guard.Up(t.v.Name); err != nil {
		t.mu.Unlock()
		return err
	}
	p, ok := t.peers[id]
	delete(t.peers, id)
	l := t.lp
	t.mu.Unlock()
	if !ok {
		return fmt.Errorf("%s: peer %d: %w", t.v.Name, id, plugins.ErrUnknownPeer)
	}
	err := fmt.Errorf("%s: peer %s disconnected: %w", t.v.Name, p.name, plugins.ErrClosed)
	l.call(func() error { l.teardownPeer(p, err); return nil })
	return nil
}

func (t *Transport) peer(id plugins.PeerID) (*peer, *loop, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.guard.Up(t.v.Name); err != nil {
		return nil, nil, err
	}
	p, ok := t.peers[id]
	if !ok {
		return nil, nil, fmt.Errorf("%s: peer %d: %w", t.v.Name, id, plugins.ErrUnknownPeer)
	}
	return p, t.lp, nil
}

// Transfer checks every op against the local regions and the peer's
// published regions, then runs the batch on the progress loop: PUTs and
// GETs in flight together (up to max_inflight), WRITEs confirmed by an
// endpoint flush before they count as complete.
func (t *Transport) Transfer(ctx context.Context, id plugins.PeerID, ops []plugins.Op, results []plugins.OpResult) error {
	if len(results) < len(ops) {
		return fmt.Errorf("%s: %d results for %d ops: %w", t.v.Name, len(results), len(ops), plugins.ErrInvalidArgument)
	}
	results = results[:len(ops)]
	clear(results)
	p, l, err := t.peer(id)
	if err != nil {
		plugins.FillResults(results, err)
		return err
	}
	b := &batch{p: p, ops: ops, res: results, local: make([]*regions.Entry, len(ops)),
		laddr: make([]uintptr, len(ops)), rr: make([]*remoteRegion, len(ops)), raddr: make([]uint64, len(ops)),
		done: make(chan struct{})}
	for i, op := range ops {
		results[i].Err = t.prepare(b, i, op)
	}
	if !l.enqueue(func() { l.enqueueBatch(b) }) {
		b.releaseAll()
		err := fmt.Errorf("%s: %w", t.v.Name, plugins.ErrClosed)
		plugins.FillResults(results, err)
		return err
	}
	select {
	case <-b.done:
	case <-ctx.Done():
		cerr := fmt.Errorf("%s: batch: %w", t.v.Name, plugins.ContextError(ctx.Err()))
		l.enqueue(func() { l.cancelBatch(b, cerr) })
		<-b.done
	}
	return nil
}

// prepare checks op i and resolves its local memory (acquired) and remote
// address.
func (t *Transport) prepare(b *batch, i int, op plugins.Op) error {
	name := t.v.Name
	if op.Kind != plugins.OpRead && op.Kind != plugins.OpWrite {
		return fmt.Errorf("%s: op kind %d: %w", name, op.Kind, plugins.ErrInvalidArgument)
	}
	if op.Length == 0 {
		return fmt.Errorf("%s: zero-length op: %w", name, plugins.ErrInvalidArgument)
	}
	rr, off, err := b.p.remote.resolve(op.RemoteRegion, op.RemoteOffset, op.Length)
	if err != nil {
		return fmt.Errorf("%s: %s at peer %s: %w", name, op.Kind, b.p.name, err)
	}
	e, mem, err := t.regions.Resolve(uint64(op.LocalRegion), op.LocalOffset, op.Length)
	if err != nil {
		return fmt.Errorf("%s: %s local side: %w", name, op.Kind, err)
	}
	b.local[i] = e
	b.laddr[i] = uintptr(unsafe.Pointer(&mem[0]))
	b.rr[i] = rr
	b.raddr[i] = rr.va + off
	return nil
}

// Close fails queued ops, revokes this node's regions at its peers, closes
// every endpoint (in-flight ops fail with ErrClosed), unmaps the regions
// and destroys the UCP worker and context. It is idempotent.
func (t *Transport) Close(ctx context.Context) error {
	t.mu.Lock()
	first, wasUp := t.guard.BeginClose()
	if !first {
		t.mu.Unlock()
		return nil
	}
	t.peers = map[plugins.PeerID]*peer{}
	l := t.lp
	t.mu.Unlock()
	if l != nil {
		l.shutdown(ctx)
	}
	err := t.regions.RemoveAll(ctx)
	if wasUp {
		t.log.Info(t.v.Name + " transport closed")
	}
	return err
}

// remoteRegion is a peer's region as this node uses it.
type remoteRegion struct {
	id      plugins.RegionID
	addr    uint64 // published (peer host's) address
	size    uint64
	va      uint64 // the address UCX is given (the peer's mapping)
	token   uint64
	packed  []byte
	rkey    ucxlib.Rkey // loop only
	revoked error       // loop only: set when the peer revoked the region
}

// remoteTable is a peer's regions; immutable after Connect except for the
// loop-only fields of its entries.
type remoteTable struct {
	*regions.Index[*remoteRegion]
}

func remoteSpan(rr *remoteRegion) regions.Span {
	return regions.Span{ID: uint64(rr.id), Addr: rr.addr, Size: rr.size}
}

func newRemoteTable(rs []plugins.RemoteRegion) (*remoteTable, error) {
	list := make([]*remoteRegion, 0, len(rs))
	for _, r := range rs {
		k, err := decodeRegionKey(r.Key)
		if err != nil {
			return nil, fmt.Errorf("region %d: %w", r.ID, err)
		}
		if r.Size > k.length {
			return nil, fmt.Errorf("region %d: published size %d exceeds its registered %d bytes: %w", r.ID, r.Size, k.length, plugins.ErrProtocol)
		}
		if len(k.rkey) > ucxlib.MaxRkey {
			return nil, fmt.Errorf("region %d: %d-byte rkey: %w", r.ID, len(k.rkey), plugins.ErrProtocol)
		}
		list = append(list, &remoteRegion{id: r.ID, addr: r.Addr, size: r.Size, va: k.va, token: k.token, packed: k.rkey})
	}
	x, err := regions.NewIndex(list, remoteSpan)
	if err != nil {
		return nil, fmt.Errorf("bad region list: %v: %w", err, plugins.ErrProtocol)
	}
	return &remoteTable{x}, nil
}

// resolve bounds-checks [off, off+n) in region id, or (id 0) the absolute
// range [off, off+n) in the peer's published address space, and returns the
// region and the offset within it.
func (rt *remoteTable) resolve(id plugins.RegionID, off, n uint64) (*remoteRegion, uint64, error) {
	rr, _, at, err := rt.Resolve(uint64(id), off, n)
	return rr, at, err
}

// thisPlace describes this process: its pid, the kernel's boot id and its
// pid namespace (zero values where /proc does not say).
func thisPlace() place {
	p := place{pid: uint32(os.Getpid())}
	if b, err := os.ReadFile("/proc/sys/kernel/random/boot_id"); err == nil {
		h, err := hex.DecodeString(strings.ReplaceAll(strings.TrimSpace(string(b)), "-", ""))
		if err == nil && len(h) == 16 {
			copy(p.boot[:], h)
		}
	}
	if ns, err := os.Readlink("/proc/self/ns/pid"); err == nil { // "pid:[4026531836]"
		if s, ok := strings.CutPrefix(ns, "pid:["); ok {
			p.pidNS, _ = strconv.ParseUint(strings.TrimSuffix(s, "]"), 10, 64)
		}
	}
	return p
}
