package host

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"github.com/hashicorp/go-plugin/runner"
	"github.com/kvconnect/kvconnect/errdefs"
	"github.com/kvconnect/kvconnect/internal/pluginrpc"
	"github.com/kvconnect/kvconnect/internal/pluginrpc/proto"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// LaunchConfig says which plugin to start and how.
type LaunchConfig struct {
	// Name is the transport's name; the binary is kvconnect-transport-<Name>.
	Name string
	// Path, when set, is the plugin binary to run; no search is done.
	Path string
	// PluginDir is the plugin_dir setting, searched first.
	PluginDir string
	// Logger receives the plugin's logs (named plugin.<Name>). Default: none.
	Logger *zap.Logger
	// StartTimeout bounds the go-plugin handshake. Default 10s.
	StartTimeout time.Duration
	// GRPCMaxMessageSize caps gRPC messages both ways (bytes); 0 =
	// pluginrpc.DefaultMaxMessage (64 MiB). Tests use it to prove no
	// payload crosses gRPC.
	GRPCMaxMessageSize int
	// Env is extra environment for the plugin process (KEY=VALUE). It is
	// added after the host's environment, so its entries win.
	Env []string
}

// Launch finds, starts and handshakes a plugin. Every failure is an
// *errdefs.InitError naming the transport, the step (errdefs.StepFindPlugin,
// errdefs.StepStartPlugin, errdefs.StepHandshake), the native code where there is one
// (errno, exit status, signal), the cause in words (with the end of the
// plugin's stderr when it said anything) and hints. Its Err wraps
// errdefs.ErrUnavailable and one of errdefs.ErrPluginNotFound, errdefs.ErrPluginStart or
// errdefs.ErrHandshake, so errors.Is works for both; a canceled ctx gives
// errdefs.ErrCanceled or errdefs.ErrTimeout instead of errdefs.ErrUnavailable. docs/PLUGIN-DIAGNOSES.md
// lists every diagnosis.
func Launch(ctx context.Context, cfg LaunchConfig) (*Plugin, error) {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = 10 * time.Second
	}
	path := cfg.Path
	if path == "" {
		var err error
		if path, _, err = findPlugin(cfg.Name, cfg.PluginDir); err != nil {
			return nil, err
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, canceledError(cfg.Name, path, err)
	}
	hostEnd, childEnd, err := pluginrpc.FDChannelPair()
	if err != nil {
		code, name := errnoOf(err)
		return nil, &errdefs.InitError{
			Transport: cfg.Name, Step: errdefs.StepStartPlugin, NativeCode: code, NativeName: name,
			Cause: fmt.Sprintf("cannot create the socket that carries region file descriptors to %s: %v", path, err),
			Hints: []string{"check the open-files limit of this process (ulimit -n) and of the system (/proc/sys/fs/file-max)"},
			Err:   fmt.Errorf("%w: %w: %w", errdefs.ErrUnavailable, errdefs.ErrPluginStart, err),
		}
	}
	base, err := socketDirs.acquire()
	if err != nil {
		hostEnd.Close()
		childEnd.Close()
		code, name := errnoOf(err)
		return nil, &errdefs.InitError{
			Transport: cfg.Name, Step: errdefs.StepStartPlugin, NativeCode: code, NativeName: name,
			Cause: fmt.Sprintf("cannot prepare to start %s: cannot create the directory for its socket: %v", path, err),
			Hints: []string{fmt.Sprintf("the plugin's socket directory is created in the temporary directory %s: check that it exists, is writable and is not full (or point TMPDIR elsewhere)", os.TempDir())},
			Err:   fmt.Errorf("%w: %w: %w", errdefs.ErrUnavailable, errdefs.ErrPluginStart, err),
		}
	}
	cmd := exec.Command(path)
	cmd.ExtraFiles = []*os.File{childEnd} // fd 3 in the child
	bindToParent(cmd)
	extraEnv := append([]string{}, cfg.Env...)
	extraEnv = append(extraEnv, pluginrpc.EnvFDChannel+"=3", pluginrpc.EnvLogLevel+"="+levelName(cfg.Logger))
	if cfg.GRPCMaxMessageSize > 0 {
		extraEnv = append(extraEnv, pluginrpc.EnvGRPCMaxMessage+"="+strconv.Itoa(cfg.GRPCMaxMessageSize))
	}
	maxMsg := pluginrpc.DefaultMaxMessage
	if cfg.GRPCMaxMessageSize > 0 {
		maxMsg = cfg.GRPCMaxMessageSize
	}
	dialOpts := []grpc.DialOption{grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMsg), grpc.MaxCallSendMsgSize(maxMsg))}
	proc := &procRunner{ctx: ctx, cmd: cmd, done: make(chan struct{}), tail: &tailBuffer{max: stderrTailMax}, socketBase: base}
	log := cfg.Logger.Named("plugin." + cfg.Name)
	goLog := pluginrpc.NewHCLogZap(cfg.Logger, "plugin."+cfg.Name)
	client := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  pluginrpc.Handshake(),
		VersionedPlugins: pluginrpc.VersionedPlugins(),
		// Our own runner, not Cmd, so that we see what the plugin prints on
		// stdout and how its process ended: diagnoses come from those
		// observations, never from go-plugin's error strings.
		RunnerFunc: func(_ hclog.Logger, base *exec.Cmd, socketDir string) (runner.Runner, error) {
			proc.socketDir = socketDir
			// base.Env is the host's environment plus go-plugin's
			// handshake variables; cfg.Env and ours come last and win.
			cmd.Env = append(append([]string{}, base.Env...), extraEnv...)
			return proc, nil
		},
		// go-plugin's socket directory goes under this process's own
		// (socketdir.go), so one that a crash leaves is found and removed.
		UnixSocketConfig: &plugin.UnixSocketConfig{TempDir: base}, // "" (TMPDIR too long): TMPDIR
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		Logger:           goLog,
		Stderr:           proc.tail,
		StartTimeout:     cfg.StartTimeout,
		GRPCDialOptions:  dialOpts,
		Managed:          false,
	})
	p := &Plugin{name: cfg.Name, path: path, client: client, proc: proc, host: pluginrpc.NewFDSender(hostEnd), log: log, goLog: goLog,
		exited: make(chan struct{}), watchEnd: make(chan struct{}), closeDone: make(chan struct{})}

	// Cancelling ctx during the start kills the process, which ends the
	// handshake at once.
	startDone, watcherDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watcherDone)
		select {
		case <-ctx.Done():
			proc.cancel()
		case <-startDone:
		}
	}()
	start := time.Now()
	rpc, err := client.Client()
	took := time.Since(start)
	close(startDone)
	<-watcherDone
	childEnd.Close() // the child has its copy now (or never will)
	if err == nil && proc.wasCanceled() {
		err = ctx.Err()
	}
	if err != nil {
		client.Kill() // waits for the process and go-plugin's readers of its output
		goLog.Detach()
		p.host.Close()
		proc.removeSocketDir()
		return nil, p.startError(ctx, cfg, err, took)
	}
	go p.watch(hostEnd)
	raw, err := rpc.Dispense(pluginrpc.PluginName)
	if err != nil {
		p.Close(context.Background())
		return nil, &errdefs.InitError{
			Transport: cfg.Name, Step: errdefs.StepHandshake,
			Cause: fmt.Sprintf("%s completed the go-plugin handshake but does not serve the %q plugin: %v", path, pluginrpc.PluginName, err),
			Hints: []string{"the binary is a go-plugin plugin of another kind, or was built with another kvconnect plugin SDK: install the plugin that ships with this kvconnect version"},
			Err:   fmt.Errorf("%w: %w", errdefs.ErrUnavailable, errdefs.ErrHandshake),
		}
	}
	p.grpcClient = &grpcClient{rpc: raw.(proto.TransportClient), name: cfg.Name, fds: p.host, crashed: p.crashReason, exited: p.exited, log: log}
	// The first call proves the plugin serves the transport service, and
	// leaves its Info for after Close.
	// Bounded like the handshake: a plugin that stops answering right
	// after it would otherwise hold a ctx without a deadline forever.
	ictx, cancel := context.WithTimeout(ctx, cfg.StartTimeout)
	_, err = p.Info(ictx)
	cancel()
	if err != nil {
		p.Close(context.Background())
		var ie *errdefs.InitError
		if errors.As(err, &ie) {
			return nil, ie
		}
		if ctx.Err() != nil { // the caller gave up: say so, not "another SDK"
			return nil, canceledError(cfg.Name, path, ctx.Err())
		}
		if errors.Is(err, errdefs.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) {
			return nil, &errdefs.InitError{
				Transport: cfg.Name, Step: errdefs.StepHandshake,
				Cause: fmt.Sprintf("%s completed the go-plugin handshake but did not answer Info within the plugin start timeout (%v): it is stopped, wedged or overloaded", path, cfg.StartTimeout),
				Hints: []string{"check the plugin process (its state in ps, what it logs); raise plugin_start_timeout on a machine this loaded"},
				Err:   fmt.Errorf("%w: %w: %w", errdefs.ErrUnavailable, errdefs.ErrHandshake, errdefs.ErrTimeout),
			}
		}
		return nil, &errdefs.InitError{
			Transport: cfg.Name, Step: errdefs.StepHandshake,
			Cause: fmt.Sprintf("%s completed the go-plugin handshake but its transport service did not answer Info: %v", path, err),
			Hints: []string{"the binary was built with another kvconnect plugin SDK: install the plugin that ships with this kvconnect version"},
			Err:   fmt.Errorf("%w: %w", errdefs.ErrUnavailable, errdefs.ErrHandshake),
		}
	}
	log.Debug("plugin started", zap.String("path", path), zap.Int("pid", p.Pid()), zap.Duration("took", took))
	return p, nil
}
