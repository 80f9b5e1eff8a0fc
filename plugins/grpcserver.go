package plugins

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/kvconnect/kvconnect/auth"
	"github.com/kvconnect/kvconnect/errdefs"
	"github.com/kvconnect/kvconnect/internal/pluginrpc"
	"github.com/kvconnect/kvconnect/internal/pluginrpc/proto"
	"github.com/kvconnect/kvconnect/internal/ring"
	"github.com/kvconnect/kvconnect/internal/shm"
)

// fdTimeout bounds how long RegisterRegion waits for its descriptor.
const fdTimeout = 10 * time.Second

// grpcServer adapts a Transport to the plugin protocol's gRPC service: it
// maps the region files the host sends and converts messages to the
// contract's types. Its methods are called concurrently by gRPC; mu
// guards the mappings.
//
// A region's memory comes in one of two ways. A legacy region has a
// descriptor of its own, mapped for that region alone (segs). A region
// of a file view names a token the host sent once for many regions (a
// slab of small regions, or a caller's file): the view is mapped whole
// the first time a region names it (views) and the region is a slice of
// it; the view is unmapped and closed once the host released it and its
// last region is deregistered.
type grpcServer struct {
	proto.UnimplementedTransportServer
	impl Transport
	log  *zap.Logger
	fds  *pluginrpc.FDReceiver

	mu      sync.Mutex
	segs    map[RegionID]*shm.Segment // legacy regions, one mapping each
	views   map[uint64]*fileView      // by token
	viewOf  map[RegionID]*fileView    // regions of views
	pending map[uint64]chan struct{}  // tokens being mapped: later users wait
	ring    *ringServer               // the data path's ring, once OpenRing set it up
	// transfers are the Transfer calls CancelTransfer can end.
	transfers transferCalls
	closed    bool // Close or shutdown stopped the ring: no new one

	// unmapped is set once Close or shutdown begins unmapping region
	// memory; registrations then fail with ErrClosed. registering counts
	// the registrations under way, which unmapAll waits for: a
	// registration touches its memory (Populate) before the transport
	// refuses it, and that memory must still be mapped.
	unmapped    bool
	registering sync.WaitGroup

	// The transport is closed once, by the first Close (the host's, or
	// shutdown's at exit); a later one gets its outcome. The memory is
	// unmapped only after a Close that succeeded: one that failed may
	// leave ops running on it (a Guard-based transport answers a second
	// Close with nil, while the first still runs or after it failed).
	closeMu   sync.Mutex
	closeDone chan struct{} // set when the first Close began; closed when it ended
	closeErr  error
}

// fileView is a file mapped once for the regions that name its token.
// Guarded by grpcServer.mu.
type fileView struct {
	token    uint64
	offset   uint64 // where the view starts in the file
	seg      *shm.Segment
	regions  int  // registered regions in it, plus registrations under way
	released bool // the host will not name the token again
}

func newServer(t Transport, log *zap.Logger, fds *pluginrpc.FDReceiver) *grpcServer {
	return &grpcServer{impl: t, log: log, fds: fds, segs: map[RegionID]*shm.Segment{},
		views: map[uint64]*fileView{}, viewOf: map[RegionID]*fileView{}, pending: map[uint64]chan struct{}{}}
}

// features are the protocol features this SDK implements.
func (s *grpcServer) features() uint32 {
	if s.fds == nil {
		return pluginrpc.FeatureCancelTransfer
	}
	f := pluginrpc.FeatureFileViews | pluginrpc.FeatureViewOffset | pluginrpc.FeatureBatchRegister | pluginrpc.FeatureCancelTransfer
	if ring.Supported {
		f |= pluginrpc.FeatureRings | pluginrpc.FeatureDoorbell
	}
	return f
}

// OpenRing sets up the shared-memory data path: the host sent the ring
// file over the fd channel.
func (s *grpcServer) OpenRing(_ context.Context, req *proto.OpenRingRequest) (*proto.OpenRingResponse, error) {
	if req.Version != ring.Version {
		return nil, pluginrpc.ToStatus(fmt.Errorf("open ring: version %d, this plugin speaks %d: %w", req.Version, ring.Version, ErrNotSupported))
	}
	l := ring.Layout{SQEntries: req.SqEntries, CQEntries: req.CqEntries, SlotSize: req.SlotSize, ArenaSlots: req.ArenaSlots}
	if err := s.openRing(req.FdToken, req.DoorbellFdToken, l, req.Kinds); err != nil {
		return nil, pluginrpc.ToStatus(err)
	}
	return &proto.OpenRingResponse{}, nil
}

func (s *grpcServer) Info(ctx context.Context, _ *proto.InfoRequest) (*proto.InfoResponse, error) {
	info, err := s.impl.Info(ctx)
	if err != nil {
		return nil, pluginrpc.ToStatus(err)
	}
	return &proto.InfoResponse{Name: info.Name, Version: info.Version, ApiVersion: int32(info.APIVersion), Capabilities: uint32(info.Capabilities),
		Features: s.features()}, nil
}

func (s *grpcServer) Init(ctx context.Context, req *proto.InitRequest) (*proto.InitResponse, error) {
	var kr *auth.Keyring
	if len(req.AuthSecrets) > 0 {
		secrets := make([]auth.Secret, len(req.AuthSecrets))
		for i, b := range req.AuthSecrets {
			secrets[i] = auth.Secret(b)
		}
		var err error
		if kr, err = auth.NewKeyring(secrets...); err != nil {
			return nil, pluginrpc.ToStatus(fmt.Errorf("init: %w", err))
		}
	}
	res, err := s.impl.Init(ctx, InitRequest{
		Hostname: req.Hostname, Metadata: req.Metadata, Protocol: req.Protocol, DeviceName: req.DeviceName,
		BindAddress: req.BindAddress, Options: req.Options, Logger: s.log, Auth: kr,
	})
	if err != nil {
		return nil, pluginrpc.ToStatus(err)
	}
	return &proto.InitResponse{Endpoint: res.Endpoint, Summary: res.Summary}, nil
}

func (s *grpcServer) RegisterRegion(ctx context.Context, req *proto.RegisterRegionRequest) (*proto.RegisterRegionResponse, error) {
	key, err := s.register(ctx, req)
	if err == nil {
		err = s.undoIfGivenUp(ctx, req.Id)
	}
	if err != nil {
		return nil, pluginrpc.ToStatus(err)
	}
	return &proto.RegisterRegionResponse{Key: key}, nil
}

// undoIfGivenUp deregisters regions whose registration succeeded after
// the host gave up on the call (its deadline passed while the transport
// registered, and a transport need not watch ctx): the host takes the
// call for failed and releases the memory, so the region must not stay.
func (s *grpcServer) undoIfGivenUp(ctx context.Context, ids ...uint64) error {
	if ctx.Err() == nil {
		return nil
	}
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	for _, id := range ids {
		s.deregister(uctx, RegionID(id))
	}
	return fmt.Errorf("register region %d: the host gave up on the call: %w", ids[0], ContextError(ctx.Err()))
}

// register maps the region req names and registers it with the
// transport.
func (s *grpcServer) register(ctx context.Context, req *proto.RegisterRegionRequest) ([]byte, error) {
	if s.fds == nil {
		return nil, fmt.Errorf("register region %d: the plugin has no fd channel (was it started by a kvconnect host?): %w", req.Id, ErrNotSupported)
	}
	if req.Size == 0 || req.Size > shm.MaxSize {
		return nil, fmt.Errorf("register region %d: size %d out of range: %w", req.Id, req.Size, ErrInvalidArgument)
	}
	s.mu.Lock()
	if s.unmapped {
		s.mu.Unlock()
		return nil, fmt.Errorf("register region %d: the transport is closed: %w", req.Id, ErrClosed)
	}
	s.registering.Add(1)
	s.mu.Unlock()
	defer s.registering.Done()
	if req.ViewSize != 0 {
		return s.registerInView(ctx, req)
	}
	f, err := s.fds.Take(req.FdToken, fdTimeout)
	if err != nil {
		return nil, fmt.Errorf("register region %d: %w", req.Id, err)
	}
	seg, err := shm.Map(f, req.FileOffset, int(req.Size))
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("register region %d: %v: %w", req.Id, err, ErrInvalidArgument)
	}
	key, err := s.impl.RegisterRegion(ctx, Region{ID: RegionID(req.Id), Addr: req.Addr, Mem: seg.Bytes(), File: seg.File(), FileOffset: req.FileOffset})
	if err != nil {
		seg.Close()
		return nil, err
	}
	s.mu.Lock()
	s.segs[RegionID(req.Id)] = seg
	s.mu.Unlock()
	return key, nil
}

// registerInView registers a region of a file view, mapping the view
// first if this is the first region to name its token.
func (s *grpcServer) registerInView(ctx context.Context, req *proto.RegisterRegionRequest) ([]byte, error) {
	if req.ViewSize > shm.MaxSize || req.ViewOffset > shm.MaxOffset || req.FileOffset < req.ViewOffset ||
		req.FileOffset-req.ViewOffset > req.ViewSize || req.Size > req.ViewSize-(req.FileOffset-req.ViewOffset) {
		return nil, fmt.Errorf("register region %d: [%d, +%d) does not fit in a file view of %d bytes at offset %d: %w",
			req.Id, req.FileOffset, req.Size, req.ViewSize, req.ViewOffset, ErrInvalidArgument)
	}
	v, err := s.acquireView(req.FdToken, req.ViewOffset, req.ViewSize)
	if err != nil {
		return nil, fmt.Errorf("register region %d: %w", req.Id, err)
	}
	all := v.seg.Bytes()
	if uint64(len(all)) != req.ViewSize || v.offset != req.ViewOffset {
		s.releaseRegion(v)
		return nil, fmt.Errorf("register region %d: token %d names a view of %d bytes at offset %d, not %d at %d: %w",
			req.Id, req.FdToken, len(all), v.offset, req.ViewSize, req.ViewOffset, ErrInvalidArgument)
	}
	at := req.FileOffset - req.ViewOffset
	mem := all[at : at+req.Size : at+req.Size]
	if err := shm.Populate(mem); err != nil {
		s.releaseRegion(v)
		return nil, fmt.Errorf("register region %d: %v: %w", req.Id, err, errdefs.ErrResourceExhausted)
	}
	key, err := s.impl.RegisterRegion(ctx, Region{ID: RegionID(req.Id), Addr: req.Addr, Mem: mem, File: v.seg.File(), FileOffset: req.FileOffset})
	if err != nil {
		s.releaseRegion(v)
		return nil, err
	}
	s.mu.Lock()
	s.viewOf[RegionID(req.Id)] = v
	s.mu.Unlock()
	return key, nil
}

// RegisterRegions registers every region of the request, or none: a
// failure deregisters the ones done and names the region that failed.
func (s *grpcServer) RegisterRegions(ctx context.Context, req *proto.RegisterRegionsRequest) (*proto.RegisterRegionsResponse, error) {
	if len(req.Regions) > MaxBatchRegions {
		return nil, pluginrpc.ToStatus(fmt.Errorf("register regions: %d regions in one call, the limit is %d: %w", len(req.Regions), MaxBatchRegions, ErrInvalidArgument))
	}
	keys := make([][]byte, 0, len(req.Regions))
	for i, r := range req.Regions {
		key, err := s.register(ctx, r)
		if err == nil && (ctx.Err() != nil || i == len(req.Regions)-1) {
			ids := make([]uint64, 0, i+1)
			for _, done := range req.Regions[:i+1] {
				ids = append(ids, done.Id)
			}
			if err = s.undoIfGivenUp(ctx, ids...); err != nil {
				return nil, pluginrpc.ToStatus(fmt.Errorf("register regions: %w", err))
			}
		}
		if err != nil {
			for _, done := range req.Regions[:i] {
				s.deregister(context.WithoutCancel(ctx), RegionID(done.Id))
			}
			return nil, pluginrpc.ToStatus(fmt.Errorf("register regions: region %d of %d: %w", i+1, len(req.Regions), err))
		}
		keys = append(keys, key)
	}
	return &proto.RegisterRegionsResponse{Keys: keys}, nil
}

// DeregisterRegions deregisters every region it names and returns the
// first failure.
func (s *grpcServer) DeregisterRegions(ctx context.Context, req *proto.DeregisterRegionsRequest) (*proto.DeregisterRegionsResponse, error) {
	var first error
	for _, id := range req.Ids {
		if err := s.deregister(ctx, RegionID(id)); err != nil && first == nil {
			first = err
		}
	}
	if first != nil {
		return nil, pluginrpc.ToStatus(first)
	}
	return &proto.DeregisterRegionsResponse{}, nil
}

// acquireView returns the view of token with one more region counted in
// it, mapping it if it is new. Concurrent first registrations of one
// token map it once: the others wait for the first.
func (s *grpcServer) acquireView(token, offset, size uint64) (*fileView, error) {
	for {
		s.mu.Lock()
		if v, ok := s.views[token]; ok {
			if v.released {
				s.mu.Unlock()
				return nil, fmt.Errorf("file view %d was released: %w", token, ErrInvalidArgument)
			}
			v.regions++
			s.mu.Unlock()
			return v, nil
		}
		if wait, busy := s.pending[token]; busy {
			s.mu.Unlock()
			<-wait
			continue
		}
		done := make(chan struct{})
		s.pending[token] = done
		s.mu.Unlock()
		v, err := s.mapView(token, offset, size)
		s.mu.Lock()
		delete(s.pending, token)
		close(done)
		if err == nil {
			s.views[token] = v
		}
		s.mu.Unlock()
		return v, err
	}
}

func (s *grpcServer) mapView(token, offset, size uint64) (*fileView, error) {
	f, err := s.fds.Take(token, fdTimeout)
	if err != nil {
		return nil, err
	}
	seg, err := shm.MapViewAt(f, offset, int(size))
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("file view %d: %v: %w", token, err, ErrInvalidArgument)
	}
	return &fileView{token: token, offset: offset, seg: seg, regions: 1}, nil
}

// releaseRegion counts one region out of v, closing v if the host has
// released it and it was the last.
func (s *grpcServer) releaseRegion(v *fileView) {
	s.mu.Lock()
	v.regions--
	last := v.regions == 0 && v.released
	if last && s.views[v.token] == v {
		delete(s.views, v.token)
	}
	s.mu.Unlock()
	if last {
		v.seg.Close()
	}
}

// ReleaseFile ends a file view: once its last region is deregistered it
// is unmapped and its descriptor closed. A token no region named is
// dropped from the fd channel.
func (s *grpcServer) ReleaseFile(_ context.Context, req *proto.ReleaseFileRequest) (*proto.ReleaseFileResponse, error) {
	s.mu.Lock()
	v, ok := s.views[req.FdToken]
	var closeNow bool
	if ok && !v.released {
		v.released = true
		closeNow = v.regions == 0
		if closeNow {
			delete(s.views, req.FdToken)
		}
	}
	s.mu.Unlock()
	if !ok && s.fds != nil {
		s.fds.Drop(req.FdToken)
	}
	if closeNow {
		v.seg.Close()
	}
	return &proto.ReleaseFileResponse{}, nil
}

func (s *grpcServer) DeregisterRegion(ctx context.Context, req *proto.DeregisterRegionRequest) (*proto.DeregisterRegionResponse, error) {
	if err := s.deregister(ctx, RegionID(req.Id)); err != nil {
		return nil, pluginrpc.ToStatus(err)
	}
	return &proto.DeregisterRegionResponse{}, nil
}

// deregister deregisters a region from the transport and drops its
// mapping.
func (s *grpcServer) deregister(ctx context.Context, id RegionID) error {
	if err := s.impl.DeregisterRegion(ctx, id); err != nil {
		return err
	}
	s.mu.Lock()
	seg := s.segs[id]
	delete(s.segs, id)
	v := s.viewOf[id]
	delete(s.viewOf, id)
	s.mu.Unlock()
	if seg != nil {
		seg.Close()
	}
	if v != nil {
		s.releaseRegion(v)
	}
	return nil
}

func (s *grpcServer) Connect(ctx context.Context, req *proto.ConnectRequest) (*proto.ConnectResponse, error) {
	info := PeerInfo{Name: req.Name, Endpoint: req.Endpoint, Regions: make([]RemoteRegion, len(req.Regions))}
	for i, r := range req.Regions {
		info.Regions[i] = RemoteRegion{ID: RegionID(r.Id), Addr: r.Addr, Size: r.Size, Key: r.Key}
	}
	id, err := s.impl.Connect(ctx, info)
	if err != nil {
		return nil, pluginrpc.ToStatus(err)
	}
	return &proto.ConnectResponse{Peer: uint64(id)}, nil
}

func (s *grpcServer) Disconnect(ctx context.Context, req *proto.DisconnectRequest) (*proto.DisconnectResponse, error) {
	if err := s.impl.Disconnect(ctx, PeerID(req.Peer)); err != nil {
		return nil, pluginrpc.ToStatus(err)
	}
	return &proto.DisconnectResponse{}, nil
}

func (s *grpcServer) Transfer(ctx context.Context, req *proto.TransferRequest) (*proto.TransferResponse, error) {
	n, err := pluginrpc.CountOps(req.Ops)
	if err != nil {
		return nil, pluginrpc.ToStatus(err)
	}
	ops := make([]Op, n)
	for i := range ops {
		ops[i] = opFromWire(pluginrpc.DecodeOp(req.Ops, i))
	}
	results := make([]OpResult, len(ops))
	if req.Id != 0 || req.TimeoutNs > 0 {
		var end context.CancelFunc
		if ctx, end, err = s.transfers.start(ctx, req.Id, req.TimeoutNs); err != nil {
			return nil, pluginrpc.ToStatus(err)
		}
		defer end()
	}
	err = s.impl.Transfer(ctx, PeerID(req.Peer), ops, results)
	resp := &proto.TransferResponse{BatchError: pluginrpc.Detail(err)}
	for i, r := range results {
		if r.Err != nil {
			resp.Errors = append(resp.Errors, &proto.OpError{Index: uint32(i), Kind: errdefs.Kind(r.Err), Message: r.Err.Error(), Kinds: errdefs.Kinds(r.Err)})
		}
	}
	return resp, nil
}

func (s *grpcServer) CancelTransfer(_ context.Context, req *proto.CancelTransferRequest) (*proto.CancelTransferResponse, error) {
	return &proto.CancelTransferResponse{Found: s.transfers.cancel(req.Id)}, nil
}

func (s *grpcServer) Close(ctx context.Context, _ *proto.CloseRequest) (*proto.CloseResponse, error) {
	if err := s.closeTransport(ctx); err != nil {
		return nil, pluginrpc.ToStatus(err)
	}
	return &proto.CloseResponse{}, nil
}

// closeTransport closes the transport the first time it is called, and
// unmaps the regions if that succeeded; later calls wait for the first
// (or their ctx) and return its outcome.
func (s *grpcServer) closeTransport(ctx context.Context) error {
	s.closeMu.Lock()
	if done := s.closeDone; done != nil {
		s.closeMu.Unlock()
		select {
		case <-done:
		case <-ctx.Done():
			return fmt.Errorf("waiting for the transport's Close under way: %w", ContextError(ctx.Err()))
		}
		s.closeMu.Lock()
		defer s.closeMu.Unlock()
		return s.closeErr
	}
	s.closeDone = make(chan struct{})
	s.closeMu.Unlock()
	err := s.impl.Close(ctx)
	// The transport failed its batches in flight: the ring's workers
	// publish them and end.
	s.stopRing()
	if err == nil {
		s.unmapAll()
	}
	// Else the transport may still use region memory: it stays mapped
	// (the process is about to end, which unmaps it safely).
	s.closeMu.Lock()
	s.closeErr = err
	close(s.closeDone)
	s.closeMu.Unlock()
	return err
}

// unmapAll unmaps every region's memory once the registrations under
// way have ended; later registrations fail with ErrClosed.
func (s *grpcServer) unmapAll() {
	s.mu.Lock()
	s.unmapped = true
	s.mu.Unlock()
	s.registering.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, seg := range s.segs {
		seg.Close()
		delete(s.segs, id)
	}
	for token, v := range s.views {
		v.seg.Close()
		delete(s.views, token)
	}
	clear(s.viewOf)
}

// shutdown runs when the host went away (plugin.Serve returned) or the
// in-memory server stopped.
func (s *grpcServer) shutdown() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.closeTransport(ctx); err != nil {
		// The regions stay mapped: the transport may still touch them, and
		// the process is exiting, which unmaps them safely.
		s.log.Warn("closing the transport at plugin exit", zap.Error(err))
	}
	if s.fds != nil {
		s.fds.Close()
	}
	_ = s.log.Sync()
}

func opFromWire(o pluginrpc.Op) Op {
	return Op{Kind: OpKind(o.Kind), LocalRegion: RegionID(o.LocalRegion), LocalOffset: o.LocalOffset,
		RemoteRegion: RegionID(o.RemoteRegion), RemoteOffset: o.RemoteOffset, Length: o.Length}
}
