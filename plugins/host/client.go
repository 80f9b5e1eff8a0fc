package host

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kvconnect/kvconnect/auth"
	"github.com/kvconnect/kvconnect/errdefs"
	"github.com/kvconnect/kvconnect/internal/pluginrpc"
	"github.com/kvconnect/kvconnect/internal/pluginrpc/proto"
	"github.com/kvconnect/kvconnect/plugins"
)

// grpcClient is the host's view of a transport served over the plugin
// protocol: it implements plugins.Transport by gRPC and sends region files
// over the fd channel.
type grpcClient struct {
	rpc  proto.TransportClient
	name string
	fds  *pluginrpc.FDSender
	// crashed reports whether the plugin process has gone: a reason and
	// ErrTransportCrashed or ErrClosed, or a nil error while it runs. nil
	// for a transport served in memory.
	crashed func() (string, error)
	// exited is closed when the plugin process exits (nil in memory).
	exited <-chan struct{}
	log    *zap.Logger
	// ring is the shared-memory data path, once set up after Init
	// (ring.go); nil: every batch is a Transfer call.
	ring atomic.Pointer[ringClient]
	// ringMu orders openRing's publishing of a ring with closeRing:
	// once ringShut is set, a ring whose OpenRing was under way is closed
	// instead of published (Close may run while Init is in flight).
	ringMu   sync.Mutex
	ringShut bool

	regMu sync.Mutex // keeps fd sends and their RegisterRegion calls in order

	infoMu   sync.Mutex
	lastInfo plugins.Info // what Info last answered, for after Close
	haveInfo bool
	// features are the protocol features the plugin's SDK reported in
	// Info (pluginrpc.Feature*).
	features atomic.Uint32
	// transferIDs numbers the Transfer calls CancelTransfer may name.
	transferIDs atomic.Uint64

	// File views (pluginrpc.FeatureFileViews): every distinct file (a slab
	// of small regions, a caller's file) crosses the fd channel once and
	// is mapped once by the plugin, however many regions it holds. viewMu
	// guards current, viewOf and every hostView's refs; it is never held
	// across a call to the plugin.
	viewMu  sync.Mutex
	current map[viewKey]*hostView // the view new regions of a file (window) go into
	viewOf  map[plugins.RegionID]*hostView
}

// viewKey is a view's file and where the view starts in it.
type viewKey struct {
	file   fileKey
	offset uint64
}

// hostView is a file sent to the plugin once: the plugin maps [offset,
// offset+size) of it when the first region names token. refs counts the
// regions registered in it and the registrations under way; at 0 the view
// is released (ReleaseFile) and never named again.
type hostView struct {
	token  uint64
	offset uint64
	size   uint64
	key    viewKey
	refs   int
}

// Files up to maxWholeView bytes are mapped whole by the plugin, as one
// view; a larger one (the sparse arena of caller memory, whose offsets
// are addresses) in windows of viewWindow bytes, or a window of a
// region's own when it crosses a window's edge. Windows need the plugin's
// view offsets feature; an older plugin gets such a region's descriptor
// alone.
const (
	maxWholeView = 1 << 40
	viewWindow   = 1 << 30
)

// window is the view [offset, offset+size) of a file of fileSize bytes
// that holds [start, end).
func window(start, end, fileSize uint64) (offset, size uint64) {
	if fileSize <= maxWholeView {
		return 0, fileSize
	}
	w := start &^ (viewWindow - 1)
	if end <= w+viewWindow {
		return w, min(viewWindow, fileSize-w)
	}
	page := uint64(os.Getpagesize())
	offset = start &^ (page - 1)
	return offset, min((end+page-1)&^(page-1), fileSize) - offset
}

var (
	_ plugins.Transport      = (*grpcClient)(nil)
	_ plugins.BatchRegistrar = (*grpcClient)(nil)
)

// Info asks the transport; once it is closed (its process gone) it
// answers what the transport last said.
func (c *grpcClient) Info(ctx context.Context) (plugins.Info, error) {
	r, err := c.rpc.Info(ctx, &proto.InfoRequest{})
	if err != nil {
		err = c.fromStatus(ctx, "info", err)
		c.infoMu.Lock()
		last, ok := c.lastInfo, c.haveInfo
		c.infoMu.Unlock()
		if ok && errors.Is(err, errdefs.ErrClosed) {
			return last, nil
		}
		return plugins.Info{}, err
	}
	info := plugins.Info{Name: r.Name, Version: r.Version, APIVersion: int(r.ApiVersion), Capabilities: plugins.Capability(r.Capabilities)}
	c.features.Store(r.Features)
	c.infoMu.Lock()
	c.lastInfo, c.haveInfo = info, true
	c.infoMu.Unlock()
	return info, nil
}

func (c *grpcClient) Init(ctx context.Context, req plugins.InitRequest) (plugins.InitResult, error) {
	r, err := c.rpc.Init(ctx, &proto.InitRequest{
		Hostname: req.Hostname, Metadata: req.Metadata, Protocol: req.Protocol, DeviceName: req.DeviceName,
		BindAddress: req.BindAddress, Options: req.Options, AuthSecrets: secretBytes(req.Auth),
	})
	if err != nil {
		return plugins.InitResult{}, c.fromStatus(ctx, "init", err)
	}
	c.openRing(ctx)
	return plugins.InitResult{Endpoint: r.Endpoint, Summary: r.Summary}, nil
}

func (c *grpcClient) RegisterRegion(ctx context.Context, r plugins.Region) ([]byte, error) {
	keys, err := c.registerRegions(ctx, []plugins.Region{r}, false)
	if err != nil {
		return nil, err
	}
	return keys[0], nil
}

// RegisterRegions registers many regions in one round trip to a plugin
// with the batch feature (plugins.BatchRegistrar), all or none; an older
// plugin gets one call per region.
func (c *grpcClient) RegisterRegions(ctx context.Context, rs []plugins.Region) ([][]byte, error) {
	keys := make([][]byte, 0, len(rs))
	for done := 0; done < len(rs); {
		n := min(len(rs)-done, plugins.MaxBatchRegions)
		k, err := c.registerRegions(ctx, rs[done:done+n], true)
		if err != nil {
			if done > 0 {
				ids := make([]plugins.RegionID, done)
				for i := range ids {
					ids[i] = rs[i].ID
				}
				c.DeregisterRegions(context.WithoutCancel(ctx), ids)
			}
			return nil, err
		}
		keys = append(keys, k...)
		done += n
	}
	return keys, nil
}

// send sends r's file over the fd channel and returns its token.
func (c *grpcClient) send(r plugins.Region) (uint64, error) {
	token, err := c.fds.Send(r.File)
	if err != nil {
		if c.crashed != nil {
			if why, gone := c.crashed(); gone != nil {
				return 0, fmt.Errorf("plugin %s: register region %d: %s: %w", c.name, r.ID, why, gone)
			}
		}
		return 0, fmt.Errorf("plugin %s: register region %d: %w", c.name, r.ID, err)
	}
	return token, nil
}

// check refuses a region a plugin cannot map.
func (c *grpcClient) check(r plugins.Region) error {
	if r.File == nil {
		return fmt.Errorf("plugin %s: register region %d: a subprocess transport needs a shared-memory region (Region.File is nil): %w", c.name, r.ID, errdefs.ErrInvalidArgument)
	}
	if len(r.Mem) == 0 {
		return fmt.Errorf("plugin %s: register region %d: empty region: %w", c.name, r.ID, errdefs.ErrInvalidArgument)
	}
	return nil
}

// registerRegions registers rs, in one RegisterRegions call when batch is
// set and the plugin has the feature, else one call each.
func (c *grpcClient) registerRegions(ctx context.Context, rs []plugins.Region, batch bool) ([][]byte, error) {
	for _, r := range rs {
		if err := c.check(r); err != nil {
			return nil, err
		}
	}
	c.regMu.Lock()
	defer c.regMu.Unlock()
	features := c.features.Load()
	reqs := make([]*proto.RegisterRegionRequest, 0, len(rs))
	views := make([]*hostView, 0, len(rs))
	undo := func() {
		for _, v := range views {
			if v != nil {
				c.unref(v)
			}
		}
	}
	for _, r := range rs {
		req, v, err := c.prepare(r, features)
		if err != nil {
			undo()
			return nil, err
		}
		reqs, views = append(reqs, req), append(views, v)
	}
	keys := make([][]byte, len(rs))
	if batch && len(rs) > 1 && features&pluginrpc.FeatureBatchRegister != 0 {
		resp, err := c.rpc.RegisterRegions(ctx, &proto.RegisterRegionsRequest{Regions: reqs})
		if err == nil && len(resp.Keys) != len(rs) {
			err = fmt.Errorf("plugin %s: register regions: %d keys for %d regions: %w", c.name, len(resp.Keys), len(rs), errdefs.ErrProtocol)
			c.rpc.DeregisterRegions(context.WithoutCancel(ctx), &proto.DeregisterRegionsRequest{Ids: regionIDs(rs)})
		} else if err != nil {
			if ctx.Err() != nil {
				c.undoGivenUp(ctx, regionIDs(rs)...)
			}
			err = c.fromStatus(ctx, "register regions", err)
		}
		if err != nil {
			undo()
			return nil, err
		}
		copy(keys, resp.Keys)
	} else {
		for i, req := range reqs {
			resp, err := c.rpc.RegisterRegion(ctx, req)
			if err != nil {
				for _, done := range reqs[:i] {
					c.rpc.DeregisterRegion(context.WithoutCancel(ctx), &proto.DeregisterRegionRequest{Id: done.Id})
				}
				if ctx.Err() != nil {
					c.undoGivenUp(ctx, req.Id)
				}
				undo()
				return nil, c.fromStatus(ctx, "register region", err)
			}
			keys[i] = resp.Key
		}
	}
	c.viewMu.Lock()
	for i, v := range views {
		if v != nil {
			c.viewOf[rs[i].ID] = v
		}
	}
	c.viewMu.Unlock()
	return keys, nil
}

// undoGivenUp deregisters, best effort, regions whose registration call
// ended with its ctx: the plugin may have finished it just as the call
// gave up (it undoes the ones that finish later itself). Unknown ids are
// fine.
func (c *grpcClient) undoGivenUp(ctx context.Context, ids ...uint64) {
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if c.features.Load()&pluginrpc.FeatureBatchRegister != 0 {
		c.rpc.DeregisterRegions(uctx, &proto.DeregisterRegionsRequest{Ids: ids})
		return
	}
	for _, id := range ids {
		c.rpc.DeregisterRegion(uctx, &proto.DeregisterRegionRequest{Id: id})
	}
}

func regionIDs(rs []plugins.Region) []uint64 {
	ids := make([]uint64, len(rs))
	for i, r := range rs {
		ids[i] = uint64(r.ID)
	}
	return ids
}

// prepare builds r's registration: a region of a file view (sending the
// file first when no view holds the range) when the plugin has views,
// else its own descriptor. The view returned holds a reference for r.
// The caller holds regMu.
func (c *grpcClient) prepare(r plugins.Region, features uint32) (*proto.RegisterRegionRequest, *hostView, error) {
	req := &proto.RegisterRegionRequest{Id: uint64(r.ID), Addr: r.Addr, Size: uint64(len(r.Mem)), FileOffset: r.FileOffset}
	if features&pluginrpc.FeatureFileViews == 0 {
		token, err := c.send(r)
		if err != nil {
			return nil, nil, err
		}
		req.FdToken = token
		return req, nil, nil
	}
	key, size, err := fileID(r.File)
	if err != nil {
		return nil, nil, fmt.Errorf("plugin %s: register region %d: %v: %w", c.name, r.ID, err, errdefs.ErrInvalidArgument)
	}
	end := r.FileOffset + uint64(len(r.Mem))
	if end < r.FileOffset || end > size {
		return nil, nil, fmt.Errorf("plugin %s: register region %d: [%d, +%d) runs past the end of %s (%d bytes): %w", c.name, r.ID, r.FileOffset, len(r.Mem), r.File.Name(), size, errdefs.ErrInvalidArgument)
	}
	off, vsize := window(r.FileOffset, end, size)
	if off != 0 && features&pluginrpc.FeatureViewOffset == 0 {
		// An older plugin maps views from the file's start only.
		token, err := c.send(r)
		if err != nil {
			return nil, nil, err
		}
		req.FdToken = token
		return req, nil, nil
	}
	vk := viewKey{file: key, offset: off}
	c.viewMu.Lock()
	v := c.current[vk]
	if v != nil && end <= v.offset+v.size {
		v.refs++
	} else {
		v = nil
	}
	c.viewMu.Unlock()
	if v == nil {
		token, err := c.send(r)
		if err != nil {
			return nil, nil, err
		}
		v = &hostView{token: token, offset: off, size: vsize, key: vk, refs: 1}
		c.viewMu.Lock()
		if c.current == nil {
			c.current, c.viewOf = map[viewKey]*hostView{}, map[plugins.RegionID]*hostView{}
		}
		// A view made for a smaller file stays until its regions go.
		c.current[vk] = v
		c.viewMu.Unlock()
	}
	req.FdToken, req.ViewSize, req.ViewOffset = v.token, v.size, v.offset
	return req, v, nil
}

// releaseTimeout bounds a ReleaseFile call.
const releaseTimeout = 10 * time.Second

// unref counts one region out of v; the last one releases the view in
// the plugin.
func (c *grpcClient) unref(v *hostView) {
	c.viewMu.Lock()
	v.refs--
	last := v.refs == 0
	if last && c.current[v.key] == v {
		delete(c.current, v.key)
	}
	c.viewMu.Unlock()
	if !last {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	// A plugin that cannot answer is gone or going: its mappings go with
	// it.
	c.rpc.ReleaseFile(ctx, &proto.ReleaseFileRequest{FdToken: v.token})
}

func (c *grpcClient) DeregisterRegion(ctx context.Context, id plugins.RegionID) error {
	_, err := c.rpc.DeregisterRegion(ctx, &proto.DeregisterRegionRequest{Id: uint64(id)})
	if err != nil {
		return c.fromStatus(ctx, "deregister region", err)
	}
	c.dropViews([]plugins.RegionID{id})
	return nil
}

// DeregisterRegions deregisters many regions in one round trip to a
// plugin with the batch feature (plugins.BatchRegistrar); every region is
// tried and the first failure returned.
func (c *grpcClient) DeregisterRegions(ctx context.Context, ids []plugins.RegionID) error {
	if c.features.Load()&pluginrpc.FeatureBatchRegister == 0 || len(ids) == 1 {
		var first error
		for _, id := range ids {
			if err := c.DeregisterRegion(ctx, id); err != nil && first == nil {
				first = err
			}
		}
		return first
	}
	raw := make([]uint64, len(ids))
	for i, id := range ids {
		raw[i] = uint64(id)
	}
	_, err := c.rpc.DeregisterRegions(ctx, &proto.DeregisterRegionsRequest{Ids: raw})
	if err != nil {
		// Some may be gone: a region the plugin no longer knows keeps
		// its view reference until Close, which is harmless.
		return c.fromStatus(ctx, "deregister regions", err)
	}
	c.dropViews(ids)
	return nil
}

// dropViews counts deregistered regions out of their views.
func (c *grpcClient) dropViews(ids []plugins.RegionID) {
	var gone []*hostView
	c.viewMu.Lock()
	for _, id := range ids {
		if v := c.viewOf[id]; v != nil {
			gone = append(gone, v)
			delete(c.viewOf, id)
		}
	}
	c.viewMu.Unlock()
	for _, v := range gone {
		c.unref(v)
	}
}

func (c *grpcClient) Connect(ctx context.Context, peer plugins.PeerInfo) (plugins.PeerID, error) {
	req := &proto.ConnectRequest{Name: peer.Name, Endpoint: peer.Endpoint, Regions: make([]*proto.RemoteRegion, len(peer.Regions))}
	for i, r := range peer.Regions {
		req.Regions[i] = &proto.RemoteRegion{Id: uint64(r.ID), Addr: r.Addr, Size: r.Size, Key: r.Key}
	}
	resp, err := c.rpc.Connect(ctx, req)
	if err != nil {
		return 0, c.fromStatus(ctx, "connect", err)
	}
	return plugins.PeerID(resp.Peer), nil
}

func (c *grpcClient) Disconnect(ctx context.Context, id plugins.PeerID) error {
	_, err := c.rpc.Disconnect(ctx, &proto.DisconnectRequest{Peer: uint64(id)})
	return c.fromStatus(ctx, "disconnect", err)
}

func (c *grpcClient) Transfer(ctx context.Context, peer plugins.PeerID, ops []plugins.Op, results []plugins.OpResult) error {
	if len(results) != len(ops) {
		err := fmt.Errorf("plugin %s: %d results for %d ops: %w", c.name, len(results), len(ops), errdefs.ErrInvalidArgument)
		plugins.FillResults(results, err)
		return err
	}
	if rc := c.ring.Load(); rc != nil && rc.usable() {
		if err := rc.transfer(ctx, peer, ops, results); !errors.Is(err, errNotForRing) {
			return err
		}
	}
	packed := make([]byte, 0, len(ops)*pluginrpc.OpRecordSize)
	for i := range ops {
		packed = pluginrpc.AppendOp(packed, opToWire(&ops[i]))
	}
	req := &proto.TransferRequest{Peer: uint64(peer), Ops: packed}
	var resp *proto.TransferResponse
	var err error
	gaveUp := false
	if c.features.Load()&pluginrpc.FeatureCancelTransfer != 0 {
		if ctx.Err() != nil {
			// Nothing of it is sent (the call below would outlive ctx).
			err := givenUpError(c.name, ctx)
			plugins.FillResults(results, err)
			return err
		}
		resp, gaveUp, err = c.cancelableTransfer(ctx, req)
	} else {
		resp, err = c.rpc.Transfer(ctx, req)
	}
	if err != nil {
		err = c.fromStatus(ctx, "transfer", err)
		plugins.FillResults(results, err)
		return err
	}
	err = c.transferResults(resp, results)
	if gaveUp {
		return givenUp(c.name, ctx, results, err)
	}
	return err
}

// transferResults applies a Transfer answer to results.
func (c *grpcClient) transferResults(resp *proto.TransferResponse, results []plugins.OpResult) error {
	plugins.FillResults(results, nil)
	for _, e := range resp.Errors {
		if int(e.Index) >= len(results) {
			err := fmt.Errorf("plugin %s: answered an error for op %d of %d: %w", c.name, e.Index, len(results), errdefs.ErrProtocol)
			plugins.FillResults(results, err)
			return err
		}
		kinds := e.Kinds
		if len(kinds) == 0 {
			kinds = []string{e.Kind}
		}
		results[e.Index].Err = errdefs.Remote(e.Message, kinds...)
	}
	return pluginrpc.FromDetail(resp.BatchError)
}

// cancelableTransfer runs a Transfer call that outlives ctx: the plugin
// gets ctx's deadline as the batch's (timeout_ns), and when ctx ends the
// host asks the plugin to cancel the batch (CancelTransfer) and waits
// for the answer up to givenUpWait, then cancels the call. So a batch
// given up on returns once the transport is done with it, as through the
// ring. gaveUp: ctx ended before the answer came.
func (c *grpcClient) cancelableTransfer(ctx context.Context, req *proto.TransferRequest) (_ *proto.TransferResponse, gaveUp bool, _ error) {
	req.Id = c.transferIDs.Add(1)
	if dl, ok := ctx.Deadline(); ok {
		req.TimeoutNs = max(int64(time.Until(dl)), 1)
	}
	call, endCall := context.WithCancel(context.WithoutCancel(ctx))
	defer endCall()
	stop := context.AfterFunc(ctx, func() {
		grace := time.AfterFunc(givenUpWait, func() {
			if call.Err() == nil {
				c.logger().Warn("the plugin did not answer a batch whose context ended; Transfer returns without it, and a WRITE of it may still land",
					zap.String("plugin", c.name), zap.Uint64("batch", req.Id), zap.Duration("waited", givenUpWait))
				endCall()
			}
		})
		context.AfterFunc(call, func() { grace.Stop() })
		c.cancelTransfer(call, req.Id)
	})
	if testBeforeTransferCall != nil {
		testBeforeTransferCall(req.Id)
	}
	resp, err := c.rpc.Transfer(call, req)
	// stop fails once ctx ended and the callback started: the batch was
	// given up on (or ctx ended right as the answer came: the ops that
	// failed then say so too).
	return resp, !stop(), err
}

// testBeforeTransferCall, when a test sets it (before any Transfer),
// runs right before a cancelable Transfer call is sent.
var testBeforeTransferCall func(id uint64)

// cancelTransfer asks the plugin to cancel batch id until it finds it
// running or the call ends: a CancelTransfer can overtake the Transfer
// call it names (another stream), and then finds nothing. Each retry
// waits longer, up to 10 ms; the call ends at the latest givenUpWait
// after ctx did.
func (c *grpcClient) cancelTransfer(call context.Context, id uint64) {
	for delay := 100 * time.Microsecond; ; delay = min(2*delay, 10*time.Millisecond) {
		resp, err := c.rpc.CancelTransfer(call, &proto.CancelTransferRequest{Id: id})
		if err != nil || resp.Found {
			return
		}
		t := time.NewTimer(delay)
		select {
		case <-call.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// Close closes the transport, then the ring: batches the transport
// failed on closing come back through it first.
func (c *grpcClient) Close(ctx context.Context) error {
	_, err := c.rpc.Close(ctx, &proto.CloseRequest{})
	c.closeRing()
	return c.fromStatus(ctx, "close", err)
}

func opToWire(o *plugins.Op) pluginrpc.Op {
	return pluginrpc.Op{Kind: uint8(o.Kind), LocalRegion: uint64(o.LocalRegion), LocalOffset: o.LocalOffset,
		RemoteRegion: uint64(o.RemoteRegion), RemoteOffset: o.RemoteOffset, Length: o.Length}
}

// fromStatus rebuilds the error behind a gRPC status. Statuses without the
// protocol's detail come from gRPC itself: the connection to the plugin
// broke, or the call's context ended.
func (c *grpcClient) fromStatus(ctx context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	if rebuilt, ok := pluginrpc.FromStatus(err); ok {
		return rebuilt
	}
	if ctx.Err() != nil {
		return fmt.Errorf("plugin %s: %s: %w", c.name, op, errdefs.FromContext(ctx.Err()))
	}
	st, _ := status.FromError(err)
	switch st.Code() {
	case codes.DeadlineExceeded:
		return fmt.Errorf("plugin %s: %s: %v: %w", c.name, op, err, errdefs.ErrTimeout)
	case codes.ResourceExhausted:
		return fmt.Errorf("plugin %s: %s: %v: %w", c.name, op, err, errdefs.ErrInvalidArgument)
	case codes.Unavailable, codes.Canceled:
		// The connection to the plugin broke or was closed: find out whether
		// the process is gone, and whether we closed it.
		if c.crashed != nil {
			if why, gone := c.crashed(); gone != nil {
				return fmt.Errorf("plugin %s: %s: %s: %w", c.name, op, why, gone)
			}
		}
		if st.Code() == codes.Canceled {
			return fmt.Errorf("plugin %s: %s: %v: %w", c.name, op, err, errdefs.ErrCanceled)
		}
		return fmt.Errorf("plugin %s: %s: lost the connection to the plugin process: %v: %w", c.name, op, err, errdefs.ErrTransportCrashed)
	}
	return fmt.Errorf("plugin %s: %s: %v: %w", c.name, op, err, errdefs.ErrInternal)
}

// secretBytes is the keyring's secrets for the wire to the plugin.
func secretBytes(k *auth.Keyring) [][]byte {
	var out [][]byte
	for _, s := range k.Secrets() {
		out = append(out, []byte(s))
	}
	return out
}
