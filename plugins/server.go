package plugins

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/go-plugin"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/kvconnect/kvconnect/internal/shm"
	"github.com/kvconnect/kvconnect/plugins/proto"
)

// Serve runs t as a plugin process: it answers the go-plugin handshake on
// stdout, serves the Transport gRPC service, maps the regions the host
// sends, and forwards t's logs to the host. Call it from a plugin's main;
// it returns when the host closes the plugin.
//
// A binary built with Serve refuses to run when started by hand (without
// the host's handshake cookie) and says so.
func Serve(t Transport) {
	refuseOtherSDK()
	log := pluginLogger(stderrSyncer(), os.Getenv(EnvLogLevel))
	srv := &grpcServer{impl: t, log: log, segs: map[RegionID]*shm.Segment{}}
	if v := os.Getenv(EnvFDChannel); v != "" {
		fd, err := strconv.Atoi(v)
		if err == nil {
			srv.fds, err = newFDReceiver(fd)
		}
		if err != nil {
			log.Error("cannot open the region fd channel; regions cannot be registered", zap.String(EnvFDChannel, v), zap.Error(err))
		}
	}
	var grpcOpts []grpc.ServerOption
	maxMsg := grpcMaxMessage
	if v := os.Getenv(EnvGRPCMaxMessage); v != "" {
		if n, err := strconv.Atoi(v); err == nil && n > 0 {
			maxMsg = n
		}
	}
	grpcOpts = append(grpcOpts, grpc.MaxRecvMsgSize(maxMsg), grpc.MaxSendMsgSize(maxMsg))
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig:  Handshake,
		VersionedPlugins: map[int]plugin.PluginSet{APIVersion: {PluginName: &grpcPlugin{server: srv}}},
		GRPCServer: func(opts []grpc.ServerOption) *grpc.Server {
			return grpc.NewServer(append(opts, grpcOpts...)...)
		},
		Logger: newHCLogZap(log, "go-plugin"),
	})
	srv.shutdown()
}

// ExitCookieMismatch is the exit status of a plugin built with Serve when
// the host that started it sent another handshake cookie: the host and the
// plugin were built with incompatible kvconnect plugin SDKs. Launch
// recognises it and says so.
const ExitCookieMismatch = 86

// refuseOtherSDK ends the process with ExitCookieMismatch, after one line
// on stderr, when the handshake cookie is set to another value than this
// SDK's. Without a cookie at all (started by hand) go-plugin explains
// itself instead.
func refuseOtherSDK() {
	v, ok := os.LookupEnv(Handshake.MagicCookieKey)
	if !ok || v == Handshake.MagicCookieValue {
		return
	}
	fmt.Fprintf(os.Stderr, "kvconnect transport plugin: the host's plugin SDK is incompatible with this plugin's: it sent handshake cookie %s=%q, this plugin expects %q; install a plugin built with the host's kvconnect version\n",
		Handshake.MagicCookieKey, v, Handshake.MagicCookieValue)
	os.Exit(ExitCookieMismatch)
}

// fdTimeout bounds how long RegisterRegion waits for its descriptor.
const fdTimeout = 10 * time.Second

// grpcServer serves a Transport to the host.
type grpcServer struct {
	proto.UnimplementedTransportServer
	impl Transport
	log  *zap.Logger
	fds  *fdReceiver

	mu   sync.Mutex
	segs map[RegionID]*shm.Segment
}

func (s *grpcServer) Info(ctx context.Context, _ *proto.InfoRequest) (*proto.InfoResponse, error) {
	info, err := s.impl.Info(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	return &proto.InfoResponse{Name: info.Name, Version: info.Version, ApiVersion: int32(info.APIVersion), Capabilities: uint32(info.Capabilities)}, nil
}

func (s *grpcServer) Init(ctx context.Context, req *proto.InitRequest) (*proto.InitResponse, error) {
	res, err := s.impl.Init(ctx, InitRequest{
		Hostname: req.Hostname, Metadata: req.Metadata, Protocol: req.Protocol, DeviceName: req.DeviceName,
		Options: req.Options, Logger: s.log,
	})
	if err != nil {
		return nil, toStatus(err)
	}
	return &proto.InitResponse{Endpoint: res.Endpoint, Summary: res.Summary}, nil
}

func (s *grpcServer) RegisterRegion(ctx context.Context, req *proto.RegisterRegionRequest) (*proto.RegisterRegionResponse, error) {
	if s.fds == nil {
		return nil, toStatus(fmt.Errorf("register region %d: the plugin has no fd channel (was it started by a kvconnect host?): %w", req.Id, ErrNotSupported))
	}
	if req.Size == 0 || req.Size > shm.MaxSize {
		return nil, toStatus(fmt.Errorf("register region %d: size %d out of range: %w", req.Id, req.Size, ErrInvalidArgument))
	}
	f, err := s.fds.take(req.FdToken, fdTimeout)
	if err != nil {
		return nil, toStatus(fmt.Errorf("register region %d: %w", req.Id, err))
	}
	seg, err := shm.Map(f, req.FileOffset, int(req.Size))
	if err != nil {
		f.Close()
		return nil, toStatus(fmt.Errorf("register region %d: %v: %w", req.Id, err, ErrInvalidArgument))
	}
	key, err := s.impl.RegisterRegion(ctx, Region{ID: RegionID(req.Id), Addr: req.Addr, Mem: seg.Bytes(), File: seg.File(), FileOffset: req.FileOffset})
	if err != nil {
		seg.Close()
		return nil, toStatus(err)
	}
	s.mu.Lock()
	s.segs[RegionID(req.Id)] = seg
	s.mu.Unlock()
	return &proto.RegisterRegionResponse{Key: key}, nil
}

func (s *grpcServer) DeregisterRegion(ctx context.Context, req *proto.DeregisterRegionRequest) (*proto.DeregisterRegionResponse, error) {
	id := RegionID(req.Id)
	if err := s.impl.DeregisterRegion(ctx, id); err != nil {
		return nil, toStatus(err)
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
		return nil, toStatus(err)
	}
	return &proto.ConnectResponse{Peer: uint64(id)}, nil
}

func (s *grpcServer) Disconnect(ctx context.Context, req *proto.DisconnectRequest) (*proto.DisconnectResponse, error) {
	if err := s.impl.Disconnect(ctx, PeerID(req.Peer)); err != nil {
		return nil, toStatus(err)
	}
	return &proto.DisconnectResponse{}, nil
}

func (s *grpcServer) Transfer(ctx context.Context, req *proto.TransferRequest) (*proto.TransferResponse, error) {
	ops, err := decodeOps(nil, req.Ops)
	if err != nil {
		return nil, toStatus(err)
	}
	results := make([]OpResult, len(ops))
	err = s.impl.Transfer(ctx, PeerID(req.Peer), ops, results)
	resp := &proto.TransferResponse{BatchError: errorDetail(err)}
	for i, r := range results {
		if r.Err != nil {
			resp.Errors = append(resp.Errors, &proto.OpError{Index: uint32(i), Kind: ErrorKind(r.Err), Message: r.Err.Error()})
		}
	}
	return resp, nil
}

func (s *grpcServer) Close(ctx context.Context, _ *proto.CloseRequest) (*proto.CloseResponse, error) {
	err := s.impl.Close(ctx)
	if err != nil {
		// The transport may still use region memory: keep it mapped (the
		// process is about to end anyway).
		return nil, toStatus(err)
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

// shutdown runs when plugin.Serve returns (the host went away).
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
		s.fds.close()
	}
	_ = s.log.Sync()
}
