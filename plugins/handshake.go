package plugins

import (
	"context"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/kvconnect/kvconnect/plugins/proto"
)

// Handshake is the go-plugin handshake every kvconnect transport plugin
// and host share. The protocol version is APIVersion; hosts accept the
// versions in VersionedPlugins.
var Handshake = plugin.HandshakeConfig{
	ProtocolVersion:  APIVersion,
	MagicCookieKey:   "KVCONNECT_TRANSPORT_PLUGIN",
	MagicCookieValue: "7f1c0a52-kvconnect-transport-v1",
}

// PluginName is the name under which a plugin process serves its transport.
const PluginName = "transport"

// Environment variables the host sets for a plugin process.
const (
	// EnvFDChannel holds the number of the inherited file descriptor on
	// which the host sends region file descriptors.
	EnvFDChannel = "KVCONNECT_FD_CHANNEL"
	// EnvGRPCMaxMessage caps gRPC message sizes in the plugin (bytes).
	EnvGRPCMaxMessage = "KVCONNECT_GRPC_MAX_MESSAGE"
	// EnvLogLevel is the plugin's log level (debug, info, warn, error).
	EnvLogLevel = "KVCONNECT_PLUGIN_LOG_LEVEL"
)

// VersionedPlugins is what the host dispenses, per protocol version.
func versionedPlugins() map[int]plugin.PluginSet {
	return map[int]plugin.PluginSet{
		APIVersion: {PluginName: &grpcPlugin{}},
	}
}

// grpcPlugin binds the Transport to go-plugin's gRPC plumbing.
type grpcPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	server *grpcServer // plugin side only
}

func (p *grpcPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	proto.RegisterTransportServer(s, p.server)
	return nil
}

func (p *grpcPlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, cc *grpc.ClientConn) (any, error) {
	return &grpcClient{rpc: proto.NewTransportClient(cc)}, nil
}
