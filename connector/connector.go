// Package connector is kvconnect's embedding API: a node that allocates
// shared-memory KV regions, publishes them to peers over a P2P handshake,
// and moves bytes to and from peers through a transport running as a
// plugin process (or in-process).
//
//	c, err := connector.New(ctx, connector.Config{Protocol: "tcp"})
//	region, err := c.Alloc(ctx, 64<<20)
//	peer, err := c.Open(ctx, "10.0.0.2:15001")
//	err = c.Transfer(ctx, peer, connector.Op{Kind: connector.OpWrite, ...})
//
// KV bytes never cross the plugin's gRPC socket: regions live in shared
// memory that the host and the plugin both map.
package connector

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/kvconnect/kvconnect/config"
	"github.com/kvconnect/kvconnect/plugins"
)

// Config is a node's configuration; see package config for the fields,
// defaults and the layered loader.
type Config = config.Config

// MetadataP2P is the P2P handshake metadata mode.
const MetadataP2P = config.MetadataP2P

// Re-exported SDK types, so embedders need only this package.
type (
	Op       = plugins.Op
	OpKind   = plugins.OpKind
	OpResult = plugins.OpResult
	RegionID = plugins.RegionID
)

// Op kinds.
const (
	OpRead  = plugins.OpRead
	OpWrite = plugins.OpWrite
)

// TransportFactory makes an in-process transport.
type TransportFactory func() plugins.Transport

// Option configures New.
type Option func(*options)

type options struct {
	log        *zap.Logger
	inProcess  map[string]TransportFactory
	launchHook func(*plugins.LaunchConfig)
}

// WithLogger sets the logger. Default: no logging.
func WithLogger(l *zap.Logger) Option { return func(o *options) { o.log = l } }

// WithInProcessTransport runs the named transport inside this process
// (from f) instead of as a plugin subprocess.
func WithInProcessTransport(name string, f TransportFactory) Option {
	return func(o *options) { o.inProcess[name] = f }
}

// WithLaunchHook lets the caller adjust how plugin processes are launched
// (extra environment, gRPC message limits).
func WithLaunchHook(h func(*plugins.LaunchConfig)) Option {
	return func(o *options) { o.launchHook = h }
}

// Connector is one kvconnect node.
type Connector struct {
	cfg  Config
	opts options
	log  *zap.Logger

	tr       plugins.Transport
	plugin   *plugins.Plugin // nil when the transport runs in-process
	trName   string
	trInfo   plugins.Info
	trResult plugins.InitResult
	rpc      *rpcServer
	endpoint string
	started  time.Time
	attempts []Attempt

	mu         sync.Mutex
	closed     bool
	crashed    error // set when the plugin process died
	regions    map[RegionID]*Region
	nextRegion RegionID
	peers      map[string]*Peer
	notify     chan Notification
	wg         sync.WaitGroup
}

// Attempt is one try at bringing a transport up.
type Attempt struct {
	Transport string        `json:"transport"`
	Err       error         `json:"-"`
	Error     string        `json:"error,omitempty"`
	Duration  time.Duration `json:"duration"`
}

// Status describes a running connector.
type Status struct {
	Session   string    `json:"session"`   // this node's session id, host:port
	Transport string    `json:"transport"` // the active transport
	Summary   string    `json:"summary"`   // its endpoint, for people
	Mode      string    `json:"mode"`      // "plugin" or "in-process"
	PluginPID int       `json:"plugin_pid,omitempty"`
	Plugin    string    `json:"plugin,omitempty"` // plugin binary
	Regions   int       `json:"regions"`
	Peers     int       `json:"peers"`
	Attempts  []Attempt `json:"attempts"`
	Healthy   bool      `json:"healthy"`
	Problem   string    `json:"problem,omitempty"`
}

// New starts a node: it brings up the configured transport, then listens
// for handshakes on the RPC port. Close releases everything.
func New(ctx context.Context, cfg Config, opts ...Option) (*Connector, error) {
	o := options{log: zap.NewNop(), inProcess: map[string]TransportFactory{}}
	for _, opt := range opts {
		opt(&o)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	c := &Connector{
		cfg: cfg, opts: o, log: o.log, started: time.Now(),
		regions: map[RegionID]*Region{}, peers: map[string]*Peer{},
		notify: make(chan Notification, 1024),
	}
	if err := c.startTransport(ctx); err != nil {
		return nil, err
	}
	if err := c.startRPC(); err != nil {
		c.closeTransport(context.Background())
		return nil, err
	}
	c.log.Info("kvconnect node up", zap.String("session", c.endpoint), zap.String("transport", c.trName),
		zap.String("endpoint", c.trResult.Summary), zap.String("mode", c.mode()))
	return c, nil
}

func (c *Connector) mode() string {
	if c.plugin != nil {
		return "plugin"
	}
	return "in-process"
}

// startTransport launches and initialises the configured transport.
func (c *Connector) startTransport(ctx context.Context) error {
	name := c.cfg.Protocol
	start := time.Now()
	err := c.tryTransport(ctx, name)
	a := Attempt{Transport: name, Err: err, Duration: time.Since(start)}
	if err != nil {
		a.Error = err.Error()
	}
	c.attempts = append(c.attempts, a)
	if err != nil {
		return fmt.Errorf("connector: transport %s: %w", name, err)
	}
	return nil
}

func (c *Connector) tryTransport(ctx context.Context, name string) error {
	var tr plugins.Transport
	if f, ok := c.opts.inProcess[name]; ok {
		tr = f()
	} else {
		lc := plugins.LaunchConfig{Name: name, PluginDir: c.cfg.PluginDir, Logger: c.log}
		if c.opts.launchHook != nil {
			c.opts.launchHook(&lc)
		}
		p, err := plugins.Launch(ctx, lc)
		if err != nil {
			return err
		}
		c.plugin = p
		tr = p
	}
	info, err := tr.Info(ctx)
	if err == nil && info.Name != name {
		err = fmt.Errorf("connector: plugin for %s says it is transport %q: %w", name, info.Name, ErrProtocol)
	}
	var res plugins.InitResult
	if err == nil {
		var optsJSON []byte
		if o := c.cfg.Transports[name]; len(o) > 0 {
			if optsJSON, err = json.Marshal(o); err != nil {
				err = fmt.Errorf("connector: transports.%s: %v: %w", name, err, ErrInvalidArgument)
			}
		}
		if err == nil {
			res, err = tr.Init(ctx, plugins.InitRequest{
				Hostname: c.cfg.Hostname, Metadata: c.cfg.Metadata, Protocol: c.cfg.Protocol,
				DeviceName: c.cfg.DeviceName, Options: optsJSON, Logger: c.log.Named(name),
			})
		}
	}
	if err != nil {
		tr.Close(context.Background())
		c.plugin = nil
		return err
	}
	c.tr, c.trName, c.trInfo, c.trResult = tr, name, info, res
	if c.plugin != nil {
		c.wg.Add(1)
		go c.watchPlugin(c.plugin)
	}
	return nil
}

// watchPlugin notices a plugin process that dies while the node runs.
func (c *Connector) watchPlugin(p *plugins.Plugin) {
	defer c.wg.Done()
	<-p.Exited()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	c.crashed = fmt.Errorf("connector: transport %s: plugin process %s exited: %w", c.trName, p.Path(), ErrTransportCrashed)
	c.log.Error("transport plugin died; transfers fail until the node is restarted", zap.String("transport", c.trName), zap.String("plugin", p.Path()))
}

func (c *Connector) startRPC() error {
	addr := net.JoinHostPort("", strconv.Itoa(c.cfg.RPCPort))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("connector: rpc_port %d: cannot listen: %v (choose another port, or 0 for a free one): %w", c.cfg.RPCPort, err, ErrInvalidArgument)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	c.endpoint = net.JoinHostPort(c.cfg.Hostname, strconv.Itoa(port))
	c.rpc = &rpcServer{c: c, ln: ln, max: c.cfg.MaxHandshakeFrame, log: c.log, conns: map[net.Conn]struct{}{}}
	c.rpc.wg.Add(1)
	go c.rpc.serve()
	return nil
}

// Endpoint is this node's session id (host:port of its RPC port), which
// peers pass to Open.
func (c *Connector) Endpoint() string { return c.endpoint }

// Transport is the name of the active transport.
func (c *Connector) Transport() string { return c.trName }

// Status reports the active transport, how it was reached and its health.
func (c *Connector) Status() Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := Status{
		Session: c.endpoint, Transport: c.trName, Summary: c.trResult.Summary, Mode: c.mode(),
		Regions: len(c.regions), Peers: len(c.peers), Attempts: append([]Attempt(nil), c.attempts...),
		Healthy: c.crashed == nil && !c.closed,
	}
	if c.plugin != nil {
		s.PluginPID, s.Plugin = c.plugin.Pid(), c.plugin.Path()
	}
	if c.crashed != nil {
		s.Problem = c.crashed.Error()
	} else if c.closed {
		s.Problem = "closed"
	}
	return s
}

// usable returns an error if the node cannot take new work.
func (c *Connector) usable() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return fmt.Errorf("connector: %w", ErrClosed)
	}
	return c.crashed
}

// descriptor builds this node's segment descriptor.
func (c *Connector) descriptor() SegmentDescriptor {
	c.mu.Lock()
	defer c.mu.Unlock()
	d := SegmentDescriptor{
		Name: c.endpoint, Protocol: c.trName, Version: descriptorVersion,
		Timestamp:  time.Now().UTC().Format(time.RFC3339Nano),
		Transports: []TransportEndpoint{{Name: c.trName, Endpoint: c.trResult.Endpoint, Summary: c.trResult.Summary}},
		Buffers:    make([]BufferDescriptor, 0, len(c.regions)),
	}
	for _, r := range c.regions {
		b := BufferDescriptor{ID: uint64(r.id), Name: r.name, Addr: r.addr, Length: uint64(len(r.mem))}
		if len(r.key) > 0 {
			b.Keys = map[string][]byte{c.trName: r.key}
		}
		d.Buffers = append(d.Buffers, b)
	}
	return d
}

// deliver queues a notification from a peer.
func (c *Connector) deliver(n Notification) error {
	select {
	case c.notify <- n:
		return nil
	default:
		return fmt.Errorf("connector: %s: notification queue full (%d waiting); the receiver is not reading Notifications: %w", c.endpoint, cap(c.notify), ErrUnavailable)
	}
}

// Notifications delivers messages peers sent with Notify.
func (c *Connector) Notifications() <-chan Notification { return c.notify }

// Notify sends a small message to a peer's node (Mooncake's notify), e.g.
// "these blocks are written".
func (c *Connector) Notify(ctx context.Context, session, name, msg string) error {
	if err := c.usable(); err != nil {
		return err
	}
	if _, _, err := splitSession(session); err != nil {
		return err
	}
	ctx, cancel := c.withTimeout(ctx, c.cfg.ConnectTimeout)
	defer cancel()
	body, err := json.Marshal(Notification{From: c.endpoint, Name: name, Msg: msg})
	if err != nil {
		return err
	}
	_, err = request(ctx, session, frameNotify, body, c.cfg.MaxHandshakeFrame)
	return err
}

func (c *Connector) withTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok || d <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, d)
}

// Close disconnects peers, frees regions, stops the transport (ending its
// plugin process) and the handshake listener. It is idempotent.
func (c *Connector) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	peers := c.peers
	c.peers = map[string]*Peer{}
	c.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var errs []error
	if c.rpc != nil {
		c.rpc.close()
	}
	for _, p := range peers {
		p.markClosed()
	}
	if err := c.closeTransport(ctx); err != nil {
		errs = append(errs, err)
	}
	// The transport is gone (its process ended, or in-process it waited
	// for every op), so nothing touches region memory any more.
	c.mu.Lock()
	regions := c.regions
	c.regions = map[RegionID]*Region{}
	c.mu.Unlock()
	for _, r := range regions {
		r.release()
	}
	c.wg.Wait()
	c.log.Info("kvconnect node closed", zap.String("session", c.endpoint))
	return errors.Join(errs...)
}

func (c *Connector) closeTransport(ctx context.Context) error {
	if c.tr == nil {
		return nil
	}
	if err := c.tr.Close(ctx); err != nil && !errors.Is(err, ErrTransportCrashed) {
		return fmt.Errorf("connector: closing transport %s: %w", c.trName, err)
	}
	return nil
}

// kindOf is the wire kind of err for handshake error replies.
func kindOf(err error) string { return plugins.ErrorKind(err) }

func remoteError(session string, er errorReply) error {
	return plugins.NewRemoteError(er.Kind, fmt.Sprintf("connector: peer %s: %s", session, er.Error))
}

func contextError(err error) error { return plugins.ContextError(err) }

// splitSession checks a session id (host:port) and returns its parts.
func splitSession(session string) (string, string, error) {
	host, port, err := net.SplitHostPort(session)
	if err != nil || host == "" || port == "" {
		return "", "", fmt.Errorf("connector: session id %q: want host:port, e.g. 10.0.0.2:15001: %w", session, ErrInvalidArgument)
	}
	return host, port, nil
}
