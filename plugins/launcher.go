package plugins

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-plugin"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc"
)

// BinaryPrefix starts the name of every transport plugin executable:
// kvconnect-transport-<name>.
const BinaryPrefix = "kvconnect-transport-"

// EnvPluginDir names a directory searched first for plugin binaries.
const EnvPluginDir = "KVCONNECT_PLUGIN_DIR"

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
	// GRPCMaxMessageSize caps gRPC messages both ways (bytes); 0 = gRPC's
	// default. Tests use it to prove no payload crosses gRPC.
	GRPCMaxMessageSize int
	// Env is extra environment for the plugin process (KEY=VALUE).
	Env []string
}

// FindPlugin looks for kvconnect-transport-<name>: in pluginDir (the
// plugin_dir setting), in $KVCONNECT_PLUGIN_DIR, beside the running
// executable, then on PATH. It returns the path and every place searched.
// When nothing is found the error wraps ErrPluginNotFound and names every
// place searched.
func FindPlugin(name, pluginDir string) (string, []string, error) {
	if name == "" || strings.ContainsAny(name, `/\`) {
		return "", nil, fmt.Errorf("plugin name %q: must be a plain transport name like tcp: %w", name, ErrInvalidArgument)
	}
	bin := BinaryPrefix + name
	var dirs []string
	if pluginDir != "" {
		dirs = append(dirs, pluginDir)
	}
	if d := os.Getenv(EnvPluginDir); d != "" && d != pluginDir {
		dirs = append(dirs, d)
	}
	if exe, err := os.Executable(); err == nil {
		dirs = append(dirs, filepath.Dir(exe))
	}
	var searched []string
	var notExec []string
	for _, d := range dirs {
		p := filepath.Join(d, bin)
		searched = append(searched, p)
		st, err := os.Stat(p)
		if err != nil || st.IsDir() {
			continue
		}
		if st.Mode().Perm()&0o111 == 0 {
			notExec = append(notExec, p)
			continue
		}
		return p, searched, nil
	}
	searched = append(searched, "$PATH ("+os.Getenv("PATH")+")")
	if p, err := exec.LookPath(bin); err == nil {
		return p, searched, nil
	}
	if len(notExec) > 0 {
		return "", searched, fmt.Errorf("plugin %s: %s exists but is not executable (chmod +x it): %w", name, strings.Join(notExec, ", "), ErrPluginStart)
	}
	return "", searched, fmt.Errorf("plugin %s: %s not found; searched %s: %w", name, bin, strings.Join(searched, ", "), ErrPluginNotFound)
}

// Plugin is a running transport plugin process. It implements Transport
// by gRPC; Close also ends the process.
type Plugin struct {
	*grpcClient
	path   string
	client *plugin.Client
	host   *fdSender
	log    *zap.Logger

	exited   chan struct{}
	closeMu  sync.Mutex
	closed   bool
	watchEnd chan struct{}
}

var _ Transport = (*Plugin)(nil)

// Launch finds, starts and handshakes a plugin. Errors wrap
// ErrPluginNotFound, ErrPluginStart (could not run, or exited before the
// handshake; the message quotes the end of its stderr) or ErrHandshake
// (wrong protocol version, no answer within StartTimeout).
func Launch(ctx context.Context, cfg LaunchConfig) (*Plugin, error) {
	path := cfg.Path
	if path == "" {
		var err error
		if path, _, err = FindPlugin(cfg.Name, cfg.PluginDir); err != nil {
			return nil, err
		}
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = 10 * time.Second
	}
	hostEnd, childEnd, err := fdChannelPair()
	if err != nil {
		return nil, fmt.Errorf("plugin %s: %w", cfg.Name, err)
	}
	cmd := exec.Command(path)
	cmd.ExtraFiles = []*os.File{childEnd} // fd 3 in the child
	bindToParent(cmd)
	cmd.Env = append(cmd.Env, cfg.Env...)
	cmd.Env = append(cmd.Env, EnvFDChannel+"=3", EnvLogLevel+"="+levelName(cfg.Logger))
	if cfg.GRPCMaxMessageSize > 0 {
		cmd.Env = append(cmd.Env, EnvGRPCMaxMessage+"="+strconv.Itoa(cfg.GRPCMaxMessageSize))
	}
	var dialOpts []grpc.DialOption
	if cfg.GRPCMaxMessageSize > 0 {
		dialOpts = append(dialOpts, grpc.WithDefaultCallOptions(
			grpc.MaxCallRecvMsgSize(cfg.GRPCMaxMessageSize), grpc.MaxCallSendMsgSize(cfg.GRPCMaxMessageSize)))
	}
	tail := &tailBuffer{max: 4096}
	log := cfg.Logger.Named("plugin." + cfg.Name)
	client := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  Handshake,
		VersionedPlugins: versionedPlugins(),
		Cmd:              cmd,
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		Logger:           &hclogZap{z: log, name: "plugin." + cfg.Name},
		Stderr:           tail,
		StartTimeout:     cfg.StartTimeout,
		GRPCDialOptions:  dialOpts,
		Managed:          false,
	})
	p := &Plugin{path: path, client: client, host: &fdSender{conn: hostEnd}, log: log,
		exited: make(chan struct{}), watchEnd: make(chan struct{})}
	start := time.Now()
	rpc, err := client.Client()
	childEnd.Close() // the child has its copy now (or never will)
	if err != nil {
		client.Kill()
		p.host.close()
		return nil, p.startError(cfg, err, time.Since(start), tail)
	}
	go p.watch(hostEnd)
	raw, err := rpc.Dispense(PluginName)
	if err != nil {
		p.Close(context.Background())
		return nil, fmt.Errorf("plugin %s (%s): dispense: %v: %w", cfg.Name, path, err, ErrHandshake)
	}
	gc := raw.(*grpcClient)
	gc.name = cfg.Name
	gc.fds = p.host
	gc.crashed = p.crashReason
	p.grpcClient = gc
	log.Debug("plugin started", zap.String("path", path), zap.Int("pid", p.Pid()), zap.Duration("took", time.Since(start)))
	return p, nil
}

func (p *Plugin) startError(cfg LaunchConfig, err error, took time.Duration, tail *tailBuffer) error {
	where := fmt.Sprintf("plugin %s (%s)", cfg.Name, p.path)
	var pe *fs.PathError
	var ee *exec.Error
	switch {
	case errors.As(err, &pe) || errors.As(err, &ee):
		return fmt.Errorf("%s: cannot run: %v: %w", where, err, ErrPluginStart)
	case p.client.Exited():
		msg := fmt.Sprintf("%s: exited before the plugin handshake", where)
		if s := tail.String(); s != "" {
			msg += "; its stderr ends with:\n" + indent(s)
		}
		return fmt.Errorf("%s: %w", msg, ErrPluginStart)
	case took >= cfg.StartTimeout:
		return fmt.Errorf("%s: no handshake within %v: %v: %w", where, cfg.StartTimeout, err, ErrHandshake)
	}
	return fmt.Errorf("%s: %v (this host speaks plugin protocol version %d): %w", where, err, APIVersion, ErrHandshake)
}

func indent(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = "    " + l
	}
	return strings.Join(lines, "\n")
}

// watch closes p.exited when the plugin process goes away: its end of the
// fd channel closes then and our read returns.
func (p *Plugin) watch(c interface{ Read([]byte) (int, error) }) {
	defer close(p.watchEnd)
	var b [8]byte
	for {
		if _, err := c.Read(b[:]); err != nil {
			break
		}
	}
	close(p.exited)
	p.closeMu.Lock()
	closed := p.closed
	p.closeMu.Unlock()
	if !closed {
		p.log.Error("transport plugin process exited unexpectedly", zap.String("path", p.path))
	}
}

// crashReason reports whether the plugin process has gone, waiting briefly
// for the exit to be noticed (a broken gRPC stream usually comes first).
// The sentinel is ErrClosed when the host closed the plugin itself,
// ErrTransportCrashed when the process died on its own.
func (p *Plugin) crashReason() (string, error) {
	select {
	case <-p.exited:
	case <-time.After(500 * time.Millisecond):
		return "", nil
	}
	p.closeMu.Lock()
	closed := p.closed
	p.closeMu.Unlock()
	if closed {
		return "the plugin was closed", ErrClosed
	}
	return fmt.Sprintf("the plugin process (%s) exited", p.path), ErrTransportCrashed
}

// Exited is closed when the plugin process has gone.
func (p *Plugin) Exited() <-chan struct{} { return p.exited }

// Pid is the plugin process id, or 0 if unknown.
func (p *Plugin) Pid() int {
	if rc := p.client.ReattachConfig(); rc != nil {
		return rc.Pid
	}
	return 0
}

// Path is the plugin binary that was started.
func (p *Plugin) Path() string { return p.path }

// Close asks the transport to close, then ends the plugin process and
// releases the fd channel. It is idempotent.
func (p *Plugin) Close(ctx context.Context) error {
	p.closeMu.Lock()
	if p.closed {
		p.closeMu.Unlock()
		return nil
	}
	p.closed = true
	p.closeMu.Unlock()
	var err error
	if p.grpcClient != nil {
		select {
		case <-p.exited:
		default:
			err = p.grpcClient.Close(ctx)
			if errors.Is(err, ErrTransportCrashed) {
				err = nil // it is going away either way
			}
		}
	}
	p.client.Kill()
	p.host.close()
	<-p.watchEnd
	return err
}

func levelName(l *zap.Logger) string {
	for _, lvl := range []zapcore.Level{zapcore.DebugLevel, zapcore.InfoLevel, zapcore.WarnLevel} {
		if l.Core().Enabled(lvl) {
			return lvl.String()
		}
	}
	return "error"
}
