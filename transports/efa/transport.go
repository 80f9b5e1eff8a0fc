// Package efa is kvconnect's AWS Elastic Fabric Adapter transport: RMA
// (fi_write / fi_read) over libfabric reliable-datagram (FI_EP_RDM)
// endpoints.
//
// libfabric is loaded with dlopen at Init (transports.efa.library, default
// libfabric.so.1), so a host without it gets a clean diagnosis at the
// "load library" step instead of a plugin that cannot start. The provider
// is configurable (transports.efa.provider): "efa" on AWS, and the software
// providers "tcp;ofi_rxm" and "shm", which implement the same RDM + RMA
// interface, run the very same code in CI.
//
// Memory registration honours every mr_mode bit the provider returns
// (FI_MR_LOCAL, FI_MR_VIRT_ADDR, FI_MR_ALLOCATED, FI_MR_PROV_KEY,
// FI_MR_ENDPOINT, FI_MR_RAW). The key a region publishes carries the
// memory key, the RMA base address the peer must use and the region size;
// the endpoint carries the provider name, address format and fi_getname
// address. One goroutine locked to an OS thread owns every libfabric call
// (the domain is opened FI_THREAD_DOMAIN) and progresses the completion
// queue, also while the node is idle, so manual-progress providers serve
// peers' RMA without the application calling in. The provider enforces
// keys and region bounds for incoming RMA; the initiator also checks every
// op against its own regions and the peer's published regions. Each node
// also publishes a small read-only region status table, which an
// initiator reads when an op fails or stalls to tell a deregistered region
// (ErrUnknownRegion) from a dead peer: the software providers report a
// stale key as a dropped connection (tcp) or not at all (shm).
//
// docs/EFA.md describes the options, the diagnoses, the provider quirks
// worked around and what awaits EFA hardware.
//
// Without cgo or off Linux the transport builds but Init fails with an
// *plugins.InitError wrapping plugins.ErrUnavailable.
package efa

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"go.uber.org/zap"

	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/plugins/regions"
	"github.com/kvconnect/kvconnect/transports/names"
)

// Name is the transport's name in configs and descriptors.
const Name = names.EFA

// Version is the transport implementation's version.
const Version = "0.1.0"

var _ plugins.Transport = (*Transport)(nil)

// Transport is the EFA (libfabric) transport. The zero value is not
// usable; call New.
type Transport struct {
	guard  plugins.Guard
	mu     sync.Mutex
	opts   Options
	log    *zap.Logger
	fab    *fabric
	peers  map[plugins.PeerID]*peer
	nextID plugins.PeerID

	regions regions.Table
}

// New returns an efa transport. It does nothing until Init: no library is
// loaded and no device is touched.
func New() *Transport {
	return &Transport{log: zap.NewNop(), peers: map[plugins.PeerID]*peer{}}
}

// Info describes the transport.
func (t *Transport) Info(ctx context.Context) (plugins.Info, error) {
	return plugins.Info{
		Name:         Name,
		Version:      Version,
		APIVersion:   plugins.APIVersion,
		Capabilities: plugins.CapRead | plugins.CapWrite | plugins.CapAbsoluteAddress,
	}, nil
}

// Init parses the options, loads libfabric, opens the provider's fabric,
// domain, address vector, completion queue and RDM endpoint, and starts the
// progress thread. A host that cannot run the provider gets an
// *plugins.InitError wrapping plugins.ErrUnavailable that names the step,
// the libfabric code and what to do.
func (t *Transport) Init(ctx context.Context, req plugins.InitRequest) (plugins.InitResult, error) {
	opts := DefaultOptions()
	if err := plugins.DecodeOptions(Name, req.Options, &opts); err != nil {
		return plugins.InitResult{}, configError(err)
	}
	if err := opts.validate(); err != nil {
		return plugins.InitResult{}, configError(err)
	}
	if opts.Domain == "" && req.DeviceName != "" {
		d, err := domainFromDevice(req.DeviceName)
		if err != nil {
			return plugins.InitResult{}, configError(err)
		}
		opts.Domain = d
	}
	if err := t.guard.BeginInit(Name); err != nil {
		return plugins.InitResult{}, err
	}
	if req.Logger != nil {
		t.log = req.Logger
	}
	fab, res, err := openFabric(opts, t.log)
	if err != nil {
		t.guard.EndInit(Name, false)
		return plugins.InitResult{}, err
	}
	t.mu.Lock()
	if err := t.guard.EndInit(Name, true); err != nil {
		t.mu.Unlock()
		fab.close(context.Background()) // Close came while Init ran
		return plugins.InitResult{}, err
	}
	t.opts = opts
	t.fab = fab
	t.mu.Unlock()
	return res, nil
}

// domainFromDevice turns Mooncake's device_name into a libfabric domain:
// the first device of a comma-separated list. A per-GPU JSON map must be
// resolved by the caller first.
func domainFromDevice(dev string) (string, error) {
	d := strings.TrimSpace(dev)
	if strings.HasPrefix(d, "{") || strings.HasSuffix(d, ".json") {
		return "", fmt.Errorf("efa: device_name %q is a per-GPU device map; pass one device (or set transports.efa.domain): %w", dev, plugins.ErrInvalidArgument)
	}
	d, _, _ = strings.Cut(d, ",")
	return strings.TrimSpace(d), nil
}

func configError(err error) *plugins.InitError {
	return &plugins.InitError{Transport: Name, Step: plugins.StepConfigure, Cause: err.Error(), Err: err}
}

func (t *Transport) fabric() (*fabric, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.guard.Up(Name); err != nil {
		return nil, err
	}
	return t.fab, nil
}

// RegisterRegion registers r's memory with the provider (fi_mr_reg) and
// returns the key peers need to reach it: memory key, RMA base address and
// size.
func (t *Transport) RegisterRegion(ctx context.Context, r plugins.Region) ([]byte, error) {
	f, err := t.fabric()
	if err != nil {
		return nil, err
	}
	if r.ID == 0 || len(r.Mem) == 0 {
		return nil, fmt.Errorf("efa: register region %d of %d bytes: id must be non-zero and memory non-empty: %w", r.ID, len(r.Mem), plugins.ErrInvalidArgument)
	}
	if r.File == nil {
		// The provider keeps the memory's address: it must be a shared
		// mapping, never memory the Go garbage collector owns.
		return nil, fmt.Errorf("efa: register region %d: only shared-memory regions (Region.File set) can be registered: %w", r.ID, plugins.ErrInvalidArgument)
	}
	key, err := f.registerMR(ctx, uint64(r.ID), r.Mem)
	if err != nil {
		return nil, err
	}
	if err := t.regions.Add(uint64(r.ID), r.Addr, r.Mem); err != nil {
		f.deregisterMR(context.Background(), uint64(r.ID))
		return nil, fmt.Errorf("efa: register: %w", err)
	}
	return key, nil
}

// DeregisterRegion waits for local ops on the region to end, then closes
// its memory registration: peers' ops with its key are refused by the
// provider from then on.
func (t *Transport) DeregisterRegion(ctx context.Context, id plugins.RegionID) error {
	f, err := t.fabric()
	if err != nil {
		return err
	}
	if err := t.regions.Remove(ctx, uint64(id)); err != nil {
		// Still in use after ctx ended: the registration stays open (and
		// the memory mapped) until Close, so nothing dangles.
		return fmt.Errorf("efa: deregister: %w", err)
	}
	return f.deregisterMR(ctx, uint64(id))
}

// remoteRegion is one of a peer's regions with its decoded key.
type remoteRegion struct {
	id   uint64
	addr uint64 // published address (the peer host's virtual address)
	size uint64
	key  regionKey
	rkey uint64 // the key ops use (fi_mr_map_raw's result for raw keys)
}

// peer is a connected peer: its regions for bounds checks and its address
// in the fabric.
type peer struct {
	id      plugins.PeerID
	name    string
	regions *regions.Index[*remoteRegion]
	conn    *peerConn
}

// resolve bounds-checks [off, off+n) in the peer's region id (or, when id
// is 0, the absolute range in whichever region holds it) and returns the
// region and the RMA address of the range's first byte.
func (p *peer) resolve(id, off, n uint64) (*remoteRegion, uint64, error) {
	r, _, at, err := p.regions.Resolve(id, off, n)
	if err != nil {
		return nil, 0, fmt.Errorf("peer %s: %w", p.name, err)
	}
	return r, r.key.Base + at, nil
}

func newPeer(info plugins.PeerInfo) (*peer, endpoint, error) {
	ep, err := parseEndpoint(info.Endpoint)
	if err != nil {
		return nil, endpoint{}, fmt.Errorf("efa: peer %q: %w", info.Name, err)
	}
	list := make([]*remoteRegion, 0, len(info.Regions))
	for _, r := range info.Regions {
		k, err := parseKey(r.Key)
		if err != nil {
			return nil, endpoint{}, fmt.Errorf("efa: peer %q region %d: %w", info.Name, r.ID, err)
		}
		if k.Size != r.Size {
			return nil, endpoint{}, fmt.Errorf("efa: peer %q region %d: published size %d but its key covers %d bytes: %w", info.Name, r.ID, r.Size, k.Size, plugins.ErrProtocol)
		}
		list = append(list, &remoteRegion{id: uint64(r.ID), addr: r.Addr, size: r.Size, key: k, rkey: k.Key})
	}
	x, err := regions.NewIndex(list, func(r *remoteRegion) regions.Span { return regions.Span{ID: r.id, Addr: r.addr, Size: r.size} })
	if err != nil {
		return nil, endpoint{}, fmt.Errorf("efa: peer %q published a bad region list: %v: %w", info.Name, err, plugins.ErrProtocol)
	}
	return &peer{name: info.Name, regions: x}, ep, nil
}

// Connect inserts the peer's address into the address vector and decodes
// its region keys. Connections (where the provider has any) are made on
// first use.
func (t *Transport) Connect(ctx context.Context, info plugins.PeerInfo) (plugins.PeerID, error) {
	f, err := t.fabric()
	if err != nil {
		return 0, err
	}
	p, ep, err := newPeer(info)
	if err != nil {
		return 0, err
	}
	conn, err := f.connect(ctx, info.Name, ep, p)
	if err != nil {
		return 0, err
	}
	p.conn = conn
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.guard.Up(Name); err != nil {
		return 0, err // Close tears the fabric down, conn with it
	}
	t.nextID++
	p.id = t.nextID
	t.peers[p.id] = p
	return p.id, nil
}

// Disconnect forgets a peer; its ops in flight fail with ErrClosed.
func (t *Transport) Disconnect(ctx context.Context, id plugins.PeerID) error {
	t.mu.Lock()
	if err := t.guard.Up(Name); err != nil {
		t.mu.Unlock()
		return err
	}
	p, ok := t.peers[id]
	delete(t.peers, id)
	f := t.fab
	t.mu.Unlock()
	if !ok {
		return fmt.Errorf("efa: peer %d: %w", id, plugins.ErrUnknownPeer)
	}
	return f.disconnect(ctx, p.conn)
}

func (t *Transport) peer(id plugins.PeerID) (*peer, *fabric, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.guard.Up(Name); err != nil {
		return nil, nil, err
	}
	p, ok := t.peers[id]
	if !ok {
		return nil, nil, fmt.Errorf("efa: peer %d: %w", id, plugins.ErrUnknownPeer)
	}
	return p, t.fab, nil
}

// Transfer checks every op against the local regions and the peer's
// published regions, splits large ops, and hands them to the progress
// thread, which keeps up to max_inflight RMA operations posted.
func (t *Transport) Transfer(ctx context.Context, id plugins.PeerID, ops []plugins.Op, results []plugins.OpResult) error {
	if len(results) != len(ops) {
		err := fmt.Errorf("efa: %d results for %d ops: %w", len(results), len(ops), plugins.ErrInvalidArgument)
		plugins.FillResults(results, err)
		return err
	}
	p, f, err := t.peer(id)
	if err != nil {
		plugins.FillResults(results, err)
		return err
	}
	if len(ops) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		err = fmt.Errorf("efa: transfer: %w", plugins.ContextError(err))
		plugins.FillResults(results, err)
		return err
	}
	b := f.newBatch(p.conn, len(ops))
	for i, op := range ops {
		results[i].Err = nil
		if err := t.prepare(f, b, p, i, op); err != nil {
			results[i].Err = fmt.Errorf("efa: op %d (%s %d bytes): %w", i, op.Kind, op.Length, err)
			b.ops[i].reported = true
			b.ops[i].pre = true
			b.unreported--
		}
	}
	if err := t.guard.Up(Name); err != nil {
		// Closed while the ops were being checked: Close took the regions
		// away, so lookups above may have failed for that reason.
		for i := range b.ops {
			if b.ops[i].entry != nil {
				b.ops[i].entry.Release()
				b.ops[i].entry = nil
			}
		}
		plugins.FillResults(results, err)
		return err
	}
	if b.unreported == 0 {
		return nil
	}
	return f.run(ctx, b, results)
}

// prepare resolves op i on both sides and appends its chunks to b.
func (t *Transport) prepare(f *fabric, b *batch, p *peer, i int, op plugins.Op) error {
	if op.Kind != plugins.OpRead && op.Kind != plugins.OpWrite {
		return fmt.Errorf("unknown op kind %d: %w", op.Kind, plugins.ErrInvalidArgument)
	}
	if op.Length == 0 {
		return fmt.Errorf("zero-length op: %w", plugins.ErrInvalidArgument)
	}
	rr, raddr, err := p.resolve(uint64(op.RemoteRegion), op.RemoteOffset, op.Length)
	if err != nil {
		return fmt.Errorf("remote: %w", err)
	}
	e, mem, err := t.regions.Resolve(uint64(op.LocalRegion), op.LocalOffset, op.Length)
	if err != nil {
		return fmt.Errorf("local: %w", err)
	}
	desc, err := f.localDesc(e.ID)
	if err != nil {
		e.Release()
		return fmt.Errorf("local: %w", err)
	}
	b.ops[i].entry = e
	b.addChunks(int32(i), op.Kind == plugins.OpWrite, mem, desc, rr, raddr, rr.rkey)
	return nil
}

// Close fails ops in flight with ErrClosed, closes the endpoint, memory
// registrations, address vector, completion queue, domain and fabric, and
// forgets every region. It is idempotent.
func (t *Transport) Close(ctx context.Context) error {
	t.mu.Lock()
	first, wasUp := t.guard.BeginClose()
	if !first {
		t.mu.Unlock()
		return nil
	}
	t.peers = map[plugins.PeerID]*peer{}
	f := t.fab
	t.mu.Unlock()
	var err error
	if f != nil {
		err = f.close(ctx)
	}
	if rerr := t.regions.RemoveAll(ctx); rerr != nil && err == nil {
		err = fmt.Errorf("efa: close: %w", rerr)
	}
	if wasUp {
		t.log.Info("efa transport closed")
	}
	return err
}
