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
	"github.com/kvconnect/kvconnect/internal/shm"
)

// fdTimeout bounds how long RegisterRegion waits for its descriptor.
const fdTimeout = 10 * time.Second

// grpcServer adapts a Transport to the plugin protocol's gRPC service: it
// maps the region files the host sends and converts messages to the
// contract's types.
type grpcServer struct {
	proto.UnimplementedTransportServer
	impl Transport
	log  *zap.Logger
	fds  *pluginrpc.FDReceiver

	mu   sync.Mutex
	segs map[RegionID]*shm.Segment
}

func newServer(t Transport, log *zap.Logger, fds *pluginrpc.FDReceiver) *grpcServer {
	return &grpcServer{impl: t, log: log, fds: fds, segs: map[RegionID]*shm.Segment{}}
}

func (s *grpcServer) Info(ctx context.Context, _ *proto.InfoRequest) (*proto.InfoResponse, error) {
	info, err := s.impl.Info(ctx)
	if err != nil {
		return nil, pluginrpc.ToStatus(err)
	}
	return &proto.InfoResponse{Name: info.Name, Version: info.Version, ApiVersion: int32(info.APIVersion), Capabilities: uint32(info.Capabilities)}, nil
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
	if s.fds == nil {
		return nil, pluginrpc.ToStatus(fmt.Errorf("register region %d: the plugin has no fd channel (was it started by a kvconnect host?): %w", req.Id, ErrNotSupported))
	}
	if req.Size == 0 || req.Size > shm.MaxSize {
		return nil, pluginrpc.ToStatus(fmt.Errorf("register region %d: size %d out of range: %w", req.Id, req.Size, ErrInvalidArgument))
	}
	f, err := s.fds.Take(req.FdToken, fdTimeout)
	if err != nil {
		return nil, pluginrpc.ToStatus(fmt.Errorf("register region %d: %w", req.Id, err))
	}
	seg, err := shm.Map(f, req.FileOffset, int(req.Size))
	if err != nil {
		f.Close()
		return nil, pluginrpc.ToStatus(fmt.Errorf("register region %d: %v: %w", req.Id, err, ErrInvalidArgument))
	}
	key, err := s.impl.RegisterRegion(ctx, Region{ID: RegionID(req.Id), Addr: req.Addr, Mem: seg.Bytes(), File: seg.File(), FileOffset: req.FileOffset})
	if err != nil {
		seg.Close()
		return nil, pluginrpc.ToStatus(err)
	}
	s.mu.Lock()
	s.segs[RegionID(req.Id)] = seg
	s.mu.Unlock()
	return &proto.RegisterRegionResponse{Key: key}, nil
}

func (s *grpcServer) DeregisterRegion(ctx context.Context, req *proto.DeregisterRegionRequest) (*proto.DeregisterRegionResponse, error) {
	id := RegionID(req.Id)
	if err := s.impl.DeregisterRegion(ctx, id); err != nil {
		return nil, pluginrpc.ToStatus(err)
	}
	s.mu.Lock()
	seg := s.segs[id]
	delete(s.segs, id)
	s.mu.Unlock()
	if seg != nil {
		seg.Close()
	}
	return &proto.DeregisterRegionResponse{}, nil
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
	err = s.impl.Transfer(ctx, PeerID(req.Peer), ops, results)
	resp := &proto.TransferResponse{BatchError: pluginrpc.Detail(err)}
	for i, r := range results {
		if r.Err != nil {
			resp.Errors = append(resp.Errors, &proto.OpError{Index: uint32(i), Kind: errdefs.Kind(r.Err), Message: r.Err.Error(), Kinds: errdefs.Kinds(r.Err)})
		}
	}
	return resp, nil
}

func (s *grpcServer) Close(ctx context.Context, _ *proto.CloseRequest) (*proto.CloseResponse, error) {
	err := s.impl.Close(ctx)
	if err != nil {
		// The transport may still use region memory: keep it mapped (the
		// process is about to end anyway).
		return nil, pluginrpc.ToStatus(err)
	}
	s.unmapAll()
	return &proto.CloseResponse{}, nil
}

func (s *grpcServer) unmapAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, seg := range s.segs {
		seg.Close()
		delete(s.segs, id)
	}
}

// shutdown runs when the host went away (plugin.Serve returned) or the
// in-memory server stopped.
func (s *grpcServer) shutdown() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.impl.Close(ctx); err != nil {
		// Leave the regions mapped: the transport may still touch them, and
		// the process is exiting, which unmaps them safely.
		s.log.Warn("closing the transport at plugin exit", zap.Error(err))
	} else {
		s.unmapAll()
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
