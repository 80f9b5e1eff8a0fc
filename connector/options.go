package connector

import (
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/plugins/host"
	"github.com/kvconnect/kvconnect/transports"
	"github.com/kvconnect/kvconnect/transports/tcp"
)

// Option configures New.
type Option func(*options)

type options struct {
	log        *zap.Logger
	catalog    *transports.Catalog
	inProcess  map[string]bool
	launchHook func(*host.LaunchConfig)
	keepTCP    bool
	metrics    prometheus.Registerer // WithMetrics
	portMin    int                   // WithRPCPortRange
	portMax    int
	segment    string // WithSegmentName
}

func newOptions(opts []Option) options {
	o := options{log: zap.NewNop(), catalog: transports.Builtin(), inProcess: map[string]bool{}, keepTCP: true}
	for _, opt := range opts {
		opt(&o)
	}
	// The connector runs tcp in-process on request (and links it anyway
	// for Mooncake endpoints): the catalog links no transport, so tcp's
	// factory is registered here unless the caller's catalog has one.
	if r, ok := o.catalog.Lookup(tcp.Name); !ok || r.New == nil {
		o.catalog = o.catalog.WithFactory(tcp.Name, func() plugins.Transport { return tcp.New() })
	}
	return o
}

// WithLogger sets the logger. Default: no logging.
func WithLogger(l *zap.Logger) Option { return func(o *options) { o.log = l } }

// WithCatalog sets the transport catalog the node reads its transports'
// default fallback chains and in-process factories from. Default:
// transports.Builtin(). Either way the node adds tcp's in-process factory
// when the catalog has none.
func WithCatalog(c *transports.Catalog) Option { return func(o *options) { o.catalog = c } }

// WithInProcess runs the named transports inside this process, made by
// their catalog registration's New, instead of as plugin subprocesses. A
// name whose registration has no factory fails New with
// ErrInvalidArgument (add one with transports.Catalog.WithFactory).
func WithInProcess(names ...string) Option {
	return func(o *options) {
		for _, n := range names {
			o.inProcess[n] = true
		}
	}
}

// WithLaunchHook lets the caller adjust how plugin processes are launched
// (extra environment, gRPC message limits).
func WithLaunchHook(h func(*host.LaunchConfig)) Option {
	return func(o *options) { o.launchHook = h }
}

// WithKeepTCP says whether a node whose chain ended on another transport
// also keeps tcp up, so peers that fell back to tcp can still reach it.
// Default true, except in strict mode (fallback: []), which never runs tcp
// unless tcp is the protocol.
func WithKeepTCP(keep bool) Option { return func(o *options) { o.keepTCP = keep } }

// WithRPCPortRange makes a node whose rpc_port is 0 bind a random free
// port in [min, max] rather than any free port, as Mooncake picks its RPC
// port in P2P mode (MC_MIN_RPC_PORT..MC_MAX_RPC_PORT, 15000-17000). New
// fails with ErrInvalidArgument for an empty or impossible range, and
// names the range when no port in it is free.
func WithRPCPortRange(min, max int) Option {
	return func(o *options) { o.portMin, o.portMax = min, max }
}

// WithSegmentName names the node's segment in the metadata service
// (Mooncake's local_server_name, which may be a bare host) instead of
// host:port of its RPC port; peers find its RPC port there. It needs a
// metadata service: in P2P mode the segment name is host:port, and New
// fails with ErrInvalidArgument.
func WithSegmentName(name string) Option { return func(o *options) { o.segment = name } }
