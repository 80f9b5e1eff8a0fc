// Command badversion answers the go-plugin handshake with the host's
// cookie but plugin protocol version 99, as a plugin built for a future
// kvconnect would.
package main

import (
	"context"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/kvconnect/kvconnect/internal/pluginrpc"
)

type grpcPlugin struct{ plugin.NetRPCUnsupportedPlugin }

func (grpcPlugin) GRPCServer(*plugin.GRPCBroker, *grpc.Server) error { return nil }

func (grpcPlugin) GRPCClient(context.Context, *plugin.GRPCBroker, *grpc.ClientConn) (any, error) {
	return nil, nil
}

func main() {
	hs := pluginrpc.Handshake()
	hs.ProtocolVersion = 99
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: hs,
		Plugins:         plugin.PluginSet{pluginrpc.PluginName: grpcPlugin{}},
		GRPCServer:      plugin.DefaultGRPCServer,
	})
}
