package plugins

import (
	"context"
	"fmt"
	"sync"

	"github.com/kvconnect/kvconnect/plugins/proto"
)

// grpcClient is the host's view of a plugin's Transport.
type grpcClient struct {
	rpc  proto.TransportClient
	name string
	fds  *fdSender
	// crashed reports whether the plugin process has gone: a reason and
	// ErrTransportCrashed or ErrClosed, or a nil error while it runs.
	crashed func() (string, error)

	regMu sync.Mutex // keeps fd sends and their RegisterRegion calls in order
}

var _ Transport = (*grpcClient)(nil)

func (c *grpcClient) Info(ctx context.Context) (Info, error) {
	r, err := c.rpc.Info(ctx, &proto.InfoRequest{})
	if err != nil {
		return Info{}, c.fromStatus(ctx, "info", err)
	}
	return Info{Name: r.Name, Version: r.Version, APIVersion: int(r.ApiVersion), Capabilities: Capability(r.Capabilities)}, nil
}

func (c *grpcClient) Init(ctx context.Context, req InitRequest) (InitResult, error) {
	r, err := c.rpc.Init(ctx, &proto.InitRequest{
		Hostname: req.Hostname, Metadata: req.Metadata, Protocol: req.Protocol, DeviceName: req.DeviceName, Options: req.Options,
	})
	if err != nil {
		return InitResult{}, c.fromStatus(ctx, "init", err)
	}
	return InitResult{Endpoint: r.Endpoint, Summary: r.Summary}, nil
}

func (c *grpcClient) RegisterRegion(ctx context.Context, r Region) ([]byte, error) {
	if r.File == nil {
		return nil, fmt.Errorf("plugin %s: register region %d: a subprocess transport needs a shared-memory region (Region.File is nil): %w", c.name, r.ID, ErrInvalidArgument)
	}
	if len(r.Mem) == 0 {
		return nil, fmt.Errorf("plugin %s: register region %d: empty region: %w", c.name, r.ID, ErrInvalidArgument)
	}
	c.regMu.Lock()
	defer c.regMu.Unlock()
	token, err := c.fds.send(r.File)
	if err != nil {
		if why, gone := c.crashed(); gone != nil {
			return nil, fmt.Errorf("plugin %s: register region %d: %s: %w", c.name, r.ID, why, gone)
		}
		return nil, fmt.Errorf("plugin %s: register region %d: %w", c.name, r.ID, err)
	}
	resp, err := c.rpc.RegisterRegion(ctx, &proto.RegisterRegionRequest{
		Id: uint64(r.ID), Addr: r.Addr, Size: uint64(len(r.Mem)), FileOffset: r.FileOffset, FdToken: token,
	})
	if err != nil {
		return nil, c.fromStatus(ctx, "register region", err)
	}
	return resp.Key, nil
}

func (c *grpcClient) DeregisterRegion(ctx context.Context, id RegionID) error {
	_, err := c.rpc.DeregisterRegion(ctx, &proto.DeregisterRegionRequest{Id: uint64(id)})
	return c.fromStatus(ctx, "deregister region", err)
}

func (c *grpcClient) Connect(ctx context.Context, peer PeerInfo) (PeerID, error) {
	req := &proto.ConnectRequest{Name: peer.Name, Endpoint: peer.Endpoint, Regions: make([]*proto.RemoteRegion, len(peer.Regions))}
	for i, r := range peer.Regions {
		req.Regions[i] = &proto.RemoteRegion{Id: uint64(r.ID), Addr: r.Addr, Size: r.Size, Key: r.Key}
	}
	resp, err := c.rpc.Connect(ctx, req)
	if err != nil {
		return 0, c.fromStatus(ctx, "connect", err)
	}
	return PeerID(resp.Peer), nil
}

func (c *grpcClient) Disconnect(ctx context.Context, id PeerID) error {
	_, err := c.rpc.Disconnect(ctx, &proto.DisconnectRequest{Peer: uint64(id)})
	return c.fromStatus(ctx, "disconnect", err)
}

func (c *grpcClient) Transfer(ctx context.Context, peer PeerID, ops []Op, results []OpResult) error {
	if len(results) != len(ops) {
		err := fmt.Errorf("plugin %s: %d results for %d ops: %w", c.name, len(results), len(ops), ErrInvalidArgument)
		FillResults(results, err)
		return err
	}
	req := &proto.TransferRequest{Peer: uint64(peer), Ops: appendOps(make([]byte, 0, len(ops)*opRecordSize), ops)}
	resp, err := c.rpc.Transfer(ctx, req)
	if err != nil {
		err = c.fromStatus(ctx, "transfer", err)
		FillResults(results, err)
		return err
	}
	FillResults(results, nil)
	for _, e := range resp.Errors {
		if int(e.Index) >= len(results) {
			err := fmt.Errorf("plugin %s: answered an error for op %d of %d: %w", c.name, e.Index, len(ops), ErrProtocol)
			FillResults(results, err)
			return err
		}
		results[e.Index].Err = NewRemoteError(e.Kind, e.Message)
	}
	return fromDetail(resp.BatchError)
}

func (c *grpcClient) Close(ctx context.Context) error {
	_, err := c.rpc.Close(ctx, &proto.CloseRequest{})
	return c.fromStatus(ctx, "close", err)
}
