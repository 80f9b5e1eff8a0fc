// Package pluginrpc is the protocol between a kvconnect host and a
// transport plugin process, shared by both sides: the go-plugin handshake,
// the gRPC service (package proto), the packed op records, the unix socket
// that carries region file descriptors, the mapping of errors to gRPC
// statuses and back, and the bridge between a plugin's log lines and the
// host's logger.
//
// It knows nothing of the Transport contract: the plugin SDK (package
// plugins) adapts a Transport to the gRPC service, and the host's
// launcher (package plugins/host) adapts the gRPC client back. Both import
// this package; it imports neither.
package pluginrpc

import (
	"context"
	"fmt"
	"os"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/kvconnect/kvconnect/internal/pluginrpc/proto"
)

// ProtocolVersion is the version of the gRPC protocol between host and
// plugin: go-plugin's application protocol version in the handshake.
const ProtocolVersion = 1

// Handshake is the go-plugin handshake every kvconnect transport plugin
// and host share.
func Handshake() plugin.HandshakeConfig {
	return plugin.HandshakeConfig{
		ProtocolVersion:  ProtocolVersion,
		MagicCookieKey:   CookieKey,
		MagicCookieValue: CookieValue,
	}
}

// The go-plugin magic cookie: a plugin started without it refuses to run.
const (
	CookieKey   = "KVCONNECT_TRANSPORT_PLUGIN"
	CookieValue = "7f1c0a52-kvconnect-transport-v1"
)

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

// DefaultMaxMessage is the gRPC message limit between host and plugin
// (both ways) unless the host sets another.
const DefaultMaxMessage = 64 << 20

// ExitCookieMismatch is the exit status of a plugin when the host that
// started it sent another handshake cookie: the host and the plugin were
// built with incompatible kvconnect plugin SDKs. The launcher recognises
// it and says so.
const ExitCookieMismatch = 86

// RefuseOtherSDK ends the process with ExitCookieMismatch, after one line
// on stderr, when the handshake cookie is set to another value than this
// SDK's. Without a cookie at all (started by hand) go-plugin explains
// itself instead.
func RefuseOtherSDK() {
	v, ok := os.LookupEnv(CookieKey)
	if !ok || v == CookieValue {
		return
	}
	fmt.Fprintf(os.Stderr, "kvconnect transport plugin: the host's plugin SDK is incompatible with this plugin's: it sent handshake cookie %s=%q, this plugin expects %q; install a plugin built with the host's kvconnect version\n",
		CookieKey, v, CookieValue)
	os.Exit(ExitCookieMismatch)
}

// VersionedPlugins is what a host dispenses, per protocol version.
func VersionedPlugins() map[int]plugin.PluginSet {
	return map[int]plugin.PluginSet{ProtocolVersion: {PluginName: &GRPCPlugin{}}}
}

// GRPCPlugin binds the Transport gRPC service to go-plugin. On the plugin
// side Impl is the service to register; on the host side GRPCClient
// returns a proto.TransportClient.
type GRPCPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	Impl proto.TransportServer // plugin side only
}

// GRPCServer registers the service (plugin side).
func (p *GRPCPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	if p.Impl == nil {
		return fmt.Errorf("pluginrpc: no transport server to register")
	}
	proto.RegisterTransportServer(s, p.Impl)
	return nil
}

// GRPCClient returns the service's client (host side).
func (p *GRPCPlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, cc *grpc.ClientConn) (any, error) {
	return proto.NewTransportClient(cc), nil
}

// Protocol features a plugin's SDK reports in InfoResponse.features.
const (
	// FeatureFileViews: the plugin maps a file sent once for many regions
	// (RegisterRegionRequest.view_size) and releases it on ReleaseFile.
	FeatureFileViews uint32 = 1 << 0
)

// FeatureRings: the plugin serves OpenRing and the shared-memory data
// path (internal/ring).
const FeatureRings uint32 = 1 << 1

// FeatureViewOffset: the plugin maps file views that start inside the
// file (RegisterRegionRequest.view_offset).
const FeatureViewOffset uint32 = 1 << 2

// FeatureBatchRegister: the plugin serves RegisterRegions and
// DeregisterRegions (many regions per round trip).
const FeatureBatchRegister uint32 = 1 << 3

// FeatureDoorbell: the plugin takes a ring's doorbell
// (OpenRingRequest.doorbell_fd_token) and its SQ sleeper waits on it
// while batches come concurrently (internal/ring.Doorbell).
const FeatureDoorbell uint32 = 1 << 4

// FeatureCancelTransfer: the plugin ends a batch at TransferRequest's
// timeout_ns and on CancelTransfer naming its id, and answers the
// Transfer call then.
const FeatureCancelTransfer uint32 = 1 << 5

// EnvRings turns the shared-memory data path off when set to 0 (the
// host then calls Transfer for every batch); docs/DATAPATH.md.
const EnvRings = "KVCONNECT_PLUGIN_RINGS"

// EnvPluginCPUProfile, set to a file name, makes a plugin process write a
// CPU profile there from start to exit; %p in the name becomes the
// plugin's pid.
const EnvPluginCPUProfile = "KVCONNECT_PLUGIN_CPUPROFILE"
