package plugins

import (
	"net"
	"os"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"

	"github.com/hashicorp/go-plugin"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/kvconnect/kvconnect/internal/pluginrpc"
)

// Serve runs t as a plugin process: it answers the go-plugin handshake on
// stdout, serves the Transport gRPC service, maps the regions the host
// sends, and forwards t's logs to the host. Call it from a plugin's main;
// it returns when the host closes the plugin, after closing t.
//
// A binary built with Serve refuses to run when started by hand (without
// the host's handshake cookie) and says so.
//
// A plugin ignores SIGTERM: a service manager or a shell signals the
// whole process group when it stops the host, and the host then closes
// its plugins in order; a host that dies takes its plugins with it
// (parent-death signal).
//
// With KVCONNECT_PLUGIN_CPUPROFILE set to a file name (%p in it becomes
// the process id) the process writes a pprof CPU profile of its whole
// life there, for profiling the plugin side of the data path.
func Serve(t Transport) {
	pluginrpc.RefuseOtherSDK()
	signal.Ignore(syscall.SIGTERM)
	log := pluginrpc.PluginLogger(pluginrpc.StderrSyncer(), os.Getenv(pluginrpc.EnvLogLevel))
	if stop := startProfile(log); stop != nil {
		defer stop()
	}
	var fds *pluginrpc.FDReceiver
	if v := os.Getenv(pluginrpc.EnvFDChannel); v != "" {
		fd, err := strconv.Atoi(v)
		if err == nil {
			fds, err = pluginrpc.NewFDReceiver(fd)
		}
		if err != nil {
			log.Error("cannot open the region fd channel; regions cannot be registered", zap.String(pluginrpc.EnvFDChannel, v), zap.Error(err))
		}
	}
	srv := newServer(t, log, fds)
	maxMsg := pluginrpc.DefaultMaxMessage
	if v := os.Getenv(pluginrpc.EnvGRPCMaxMessage); v != "" {
		if n, err := strconv.Atoi(v); err == nil && n > 0 {
			maxMsg = n
		}
	}
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig:  pluginrpc.Handshake(),
		VersionedPlugins: map[int]plugin.PluginSet{pluginrpc.ProtocolVersion: {pluginrpc.PluginName: &pluginrpc.GRPCPlugin{Impl: srv}}},
		GRPCServer: func(opts []grpc.ServerOption) *grpc.Server {
			return grpc.NewServer(append(opts, grpc.MaxRecvMsgSize(maxMsg), grpc.MaxSendMsgSize(maxMsg))...)
		},
		Logger: pluginrpc.NewHCLogZap(log, "go-plugin"),
	})
	srv.shutdown()
}

// ServeListener serves t's gRPC service on lis, reading region file
// descriptors from fdChannel (the plugin's end of a SOCK_SEQPACKET unix
// socket pair; see plugins/host), until stop is called: stop ends the
// server, closes t and unmaps its regions. It is Serve without a process
// and without go-plugin's handshake, for hosting a transport on a
// connection of your own, such as the in-memory one
// plugins/host.InMemory and plugins/transporttest use. ServeListener
// duplicates fdChannel: the caller keeps it. log may be nil.
func ServeListener(lis net.Listener, t Transport, fdChannel *os.File, log *zap.Logger) (stop func(), err error) {
	if log == nil {
		log = zap.NewNop()
	}
	var fds *pluginrpc.FDReceiver
	if fdChannel != nil {
		fds, err = pluginrpc.NewFDReceiverFile(fdChannel)
		if err != nil {
			return nil, err
		}
	}
	srv := newServer(t, log, fds)
	gs := grpc.NewServer(grpc.MaxRecvMsgSize(pluginrpc.DefaultMaxMessage), grpc.MaxSendMsgSize(pluginrpc.DefaultMaxMessage))
	(&pluginrpc.GRPCPlugin{Impl: srv}).GRPCServer(nil, gs)
	done := make(chan struct{})
	go func() { defer close(done); gs.Serve(lis) }()
	return func() {
		gs.Stop()
		<-done
		srv.shutdown()
	}, nil
}

// startProfile starts the CPU profile KVCONNECT_PLUGIN_CPUPROFILE asks
// for, and returns what stops it (nil when none was asked for).
func startProfile(log *zap.Logger) func() {
	name := os.Getenv(pluginrpc.EnvPluginCPUProfile)
	if name == "" {
		return nil
	}
	name = strings.ReplaceAll(name, "%p", strconv.Itoa(os.Getpid()))
	f, err := os.Create(name)
	if err != nil {
		log.Warn("cannot write the CPU profile", zap.String(pluginrpc.EnvPluginCPUProfile, name), zap.Error(err))
		return nil
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		log.Warn("cannot start the CPU profile", zap.String(pluginrpc.EnvPluginCPUProfile, name), zap.Error(err))
		return nil
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}
}
