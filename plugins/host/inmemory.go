package host

import (
	"context"
	"net"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/kvconnect/kvconnect/errdefs"
	"github.com/kvconnect/kvconnect/internal/pluginrpc"
	"github.com/kvconnect/kvconnect/internal/pluginrpc/proto"
	"github.com/kvconnect/kvconnect/plugins"
)

// InMemory serves t over the plugin protocol inside this process (an
// in-memory gRPC connection and a real fd channel) and returns the host's
// client for it, as go-plugin's TestPluginGRPCConn does. Every call goes
// through the same gRPC service, op packing, error mapping and region
// file passing a plugin process uses, so a transport's author can test
// plugin mode without building a binary. Close on the returned Transport
// closes t and releases the connection. log may be nil.
func InMemory(t plugins.Transport, name string, log *zap.Logger) (plugins.Transport, error) {
	hostEnd, childEnd, err := pluginrpc.FDChannelPair()
	if err != nil {
		return nil, err
	}
	defer childEnd.Close() // ServeListener keeps its own copy
	lis := bufconn.Listen(1 << 20)
	stop, err := plugins.ServeListener(lis, t, childEnd, log)
	if err != nil {
		hostEnd.Close()
		lis.Close()
		return nil, err
	}
	cc, err := grpc.NewClient("passthrough:///inmemory",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(pluginrpc.DefaultMaxMessage), grpc.MaxCallSendMsgSize(pluginrpc.DefaultMaxMessage)))
	if err != nil {
		stop()
		hostEnd.Close()
		return nil, err
	}
	m := &inMemory{cc: cc, stop: stop}
	if log == nil {
		log = zap.NewNop()
	}
	m.grpcClient = &grpcClient{rpc: proto.NewTransportClient(cc), name: name, fds: pluginrpc.NewFDSender(hostEnd), crashed: m.closedReason, log: log}
	if _, err := m.Info(context.Background()); err != nil { // and keep it for after Close
		m.Close(context.Background())
		return nil, err
	}
	return m, nil
}

// closedReason tells calls that fail after Close why.
func (m *inMemory) closedReason() (string, error) {
	if m.closed.Load() {
		return "the in-memory transport was closed", errdefs.ErrClosed
	}
	return "", nil
}

// inMemory is a transport served by InMemory.
type inMemory struct {
	*grpcClient
	cc   *grpc.ClientConn
	stop func()

	once   sync.Once
	closed atomic.Bool
}

// Close closes the served transport, then the connection. It is
// idempotent: later calls return nil.
func (m *inMemory) Close(ctx context.Context) error {
	var err error
	m.once.Do(func() {
		err = m.grpcClient.Close(ctx)
		m.closed.Store(true)
		m.stop()
		m.fds.Close()
		if cerr := m.cc.Close(); cerr != nil && err == nil && status.Code(cerr) != codes.Canceled {
			err = cerr
		}
	})
	return err
}
