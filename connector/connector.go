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
	"github.com/kvconnect/kvconnect/errdefs"
	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/plugins/host"
	"github.com/kvconnect/kvconnect/transports"
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

// Option configures New.
type Option func(*options)

type options struct {
	log        *zap.Logger
	catalog    *transports.Catalog
	inProcess  map[string]bool
	launchHook func(*host.LaunchConfig)
	keepTCP    bool
}

func newOptions(opts []Option) options {
	o := options{log: zap.NewNop(), catalog: transports.Builtin(), inProcess: map[string]bool{}, keepTCP: true}
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// WithLogger sets the logger. Default: no logging.
func WithLogger(l *zap.Logger) Option { return func(o *options) { o.log = l } }

// WithCatalog sets the transport catalog the node reads its transports'
// default fallback chains and in-process factories from. Default:
// transports.Builtin().
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

// activeTransport is a transport that came up.
type activeTransport struct {
	name   string
	tr     plugins.Transport
	plugin *host.Plugin // nil when in-process
	info   plugins.Info
	res    plugins.InitResult

	crashed  error // guarded by Connector.mu
	restarts int   // how many times this transport's plugin was restarted
}

func (at *activeTransport) mode() string {
	if at.plugin != nil {
		return "plugin"
	}
	return "in-process"
}

// Connector is one kvconnect node.
type Connector struct {
	cfg  Config
	opts options
	log  *zap.Logger

	// transports that came up, in preference order: the chain's survivor
	// first, then tcp if kept up beside it. A restarted plugin replaces its
	// entry (under mu); read it with c.active().
	transports []*activeTransport
	attempts   []Attempt
	rpc        *rpcServer
	endpoint   string
	hostID     string
	started    time.Time

	// regMu orders region (de)registration with plugin restarts, so a
	// restarted transport gets every region.
	regMu sync.Mutex

	mu         sync.Mutex
	closed     bool
	regions    map[RegionID]*Region
	draining   map[RegionID]*Region // freed, but a transport may still use them
	nextRegion RegionID
	peers      map[string]*Peer
	notify     chan Notification
	wg         sync.WaitGroup
	closing    chan struct{} // closed when Close begins
}

// TransportStatus describes one transport the node has up.
type TransportStatus struct {
	Name      string `json:"name"`
	Summary   string `json:"summary"` // its endpoint, for people
	Mode      string `json:"mode"`    // "plugin" or "in-process"
	PluginPID int    `json:"plugin_pid,omitempty"`
	Plugin    string `json:"plugin,omitempty"` // plugin binary
	Healthy   bool   `json:"healthy"`
	Problem   string `json:"problem,omitempty"`
	Restarts  int    `json:"restarts,omitempty"` // plugin restarts after crashes
}

// Status describes a running connector.
type Status struct {
	Session   string `json:"session"`   // this node's session id, host:port
	Transport string `json:"transport"` // the preferred active transport
	Summary   string `json:"summary"`
	Mode      string `json:"mode"` // of the preferred transport
	PluginPID int    `json:"plugin_pid,omitempty"`
	Plugin    string `json:"plugin,omitempty"`
	// Transports are all transports up, in preference order.
	Transports []TransportStatus `json:"transports"`
	// Attempts are the chain's tries, in order, with their durations and
	// diagnoses.
	Attempts []Attempt `json:"attempts"`
	Fallback bool      `json:"fallback"` // the preferred transport is not the configured protocol
	Regions  int       `json:"regions"`
	Peers    int       `json:"peers"`
	Healthy  bool      `json:"healthy"`
	Problem  string    `json:"problem,omitempty"`
}

// New starts a node: it brings up the first transport of the chain
// (protocol, then fallback) that works, then listens for handshakes on the
// RPC port. If none works it returns a *ChainError listing every attempt.
// Close releases everything.
func New(ctx context.Context, cfg Config, opts ...Option) (*Connector, error) {
	o := newOptions(opts)
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	c := &Connector{
		cfg: cfg, opts: o, log: o.log, started: time.Now(),
		regions: map[RegionID]*Region{}, draining: map[RegionID]*Region{}, peers: map[string]*Peer{},
		notify: make(chan Notification, 1024), closing: make(chan struct{}),
	}
	c.hostID = hostID()
	if err := c.startChain(ctx); err != nil {
		return nil, err
	}
	if err := c.startRPC(); err != nil {
		c.closeTransports(context.Background())
		c.wg.Wait()
		return nil, err
	}
	names := make([]string, len(c.transports))
	for i, at := range c.transports {
		names[i] = at.name
	}
	c.log.Info("kvconnect node up", zap.String("session", c.endpoint), zap.Strings("transports", names),
		zap.String("endpoint", c.transports[0].res.Summary), zap.String("mode", c.transports[0].mode()))
	return c, nil
}

// active returns the transports up, in preference order.
func (c *Connector) active() []*activeTransport {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*activeTransport(nil), c.transports...)
}

// primary is the preferred transport.
func (c *Connector) primary() *activeTransport { return c.active()[0] }

// watchPlugin notices a plugin process that dies while the node runs.
func (c *Connector) watchPlugin(at *activeTransport) {
	defer c.wg.Done()
	<-at.plugin.Exited()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	why := fmt.Sprintf("plugin process %s exited", at.plugin.Path())
	tail := at.plugin.StderrTail()
	if tail != "" {
		why += "; its stderr ends with:\n" + tail
	}
	at.crashed = fmt.Errorf("connector: transport %s: %s: %w", at.name, why, ErrTransportCrashed)
	c.log.Error("transport plugin died; restarting it",
		zap.String("transport", at.name), zap.String("plugin", at.plugin.Path()), zap.String("stderr_tail", tail))
	c.wg.Add(1)
	go c.restart(at)
}

func (c *Connector) startRPC() error {
	addr := net.JoinHostPort(c.cfg.BindAddress, strconv.Itoa(c.cfg.RPCPort))
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

// Transport is the name of the preferred active transport.
func (c *Connector) Transport() string { return c.primary().name }

// Status reports the transports up, how the chain got there and health.
func (c *Connector) Status() Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.transports[0]
	s := Status{
		Session: c.endpoint, Transport: p.name, Summary: p.res.Summary, Mode: p.mode(),
		Attempts: append([]Attempt(nil), c.attempts...), Fallback: p.name != c.cfg.Protocol,
		Regions: len(c.regions), Peers: len(c.peers), Healthy: !c.closed,
	}
	if p.plugin != nil {
		s.PluginPID, s.Plugin = p.plugin.Pid(), p.plugin.Path()
	}
	for _, at := range c.transports {
		ts := TransportStatus{Name: at.name, Summary: at.res.Summary, Mode: at.mode(), Healthy: at.crashed == nil, Restarts: at.restarts}
		if at.plugin != nil {
			ts.PluginPID, ts.Plugin = at.plugin.Pid(), at.plugin.Path()
		}
		if at.crashed != nil {
			ts.Problem = at.crashed.Error()
			s.Healthy = false
			if s.Problem == "" {
				s.Problem = ts.Problem
			}
		}
		s.Transports = append(s.Transports, ts)
	}
	if c.closed {
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
	return nil
}

// usableOn returns an error if transport at cannot take new work.
func (c *Connector) usableOn(at *activeTransport) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return fmt.Errorf("connector: %w", ErrClosed)
	}
	return at.crashed
}

// descriptor builds this node's segment descriptor.
func (c *Connector) descriptor() SegmentDescriptor {
	c.mu.Lock()
	defer c.mu.Unlock()
	d := SegmentDescriptor{
		Name: c.endpoint, Protocol: c.transports[0].name, Version: descriptorVersion, HostID: c.hostID,
		Timestamp: time.Now().UTC().Format(time.RFC3339Nano),
		Buffers:   make([]BufferDescriptor, 0, len(c.regions)),
	}
	for _, at := range c.transports {
		if at.crashed == nil {
			d.Transports = append(d.Transports, TransportEndpoint{Name: at.name, Endpoint: at.res.Endpoint, Summary: at.res.Summary})
		}
	}
	for _, r := range c.regions {
		b := BufferDescriptor{ID: uint64(r.id), Name: r.name, Addr: r.addr, Length: uint64(len(r.mem))}
		for name, key := range r.keys {
			if len(key) > 0 {
				if b.Keys == nil {
					b.Keys = map[string][]byte{}
				}
				b.Keys[name] = key
			}
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

// Notifications delivers messages peers sent with Notify. It is closed by
// Close.
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

// Close disconnects peers, frees regions, stops the transports (ending
// their plugin processes) and the handshake listener. It is idempotent.
func (c *Connector) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	close(c.closing)
	peers := c.peers
	c.peers = map[string]*Peer{}
	c.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if c.rpc != nil {
		c.rpc.close()
	}
	// No handshake handler runs any more, so nothing sends on notify.
	close(c.notify)
	for _, p := range peers {
		p.markClosed()
	}
	err := c.closeTransports(ctx)
	c.mu.Lock()
	regions := c.regions
	c.regions = map[RegionID]*Region{}
	for id, r := range c.draining {
		regions[id] = r
	}
	c.draining = map[RegionID]*Region{}
	c.mu.Unlock()
	// Plugin processes are gone once closed, so nothing of theirs touches
	// region memory. An in-process transport that failed to close may still
	// run ops on it: then the memory stays mapped (a leak, not corruption).
	inProcessFailed := false
	if err != nil {
		for _, at := range c.active() {
			inProcessFailed = inProcessFailed || at.plugin == nil
		}
	}
	if !inProcessFailed {
		for _, r := range regions {
			r.release()
		}
	}
	c.wg.Wait()
	c.log.Info("kvconnect node closed", zap.String("session", c.endpoint))
	return err
}

func (c *Connector) closeTransports(ctx context.Context) error {
	var errs []error
	for _, at := range c.active() {
		if err := closeBounded(ctx, at.tr); err != nil && !errors.Is(err, ErrTransportCrashed) {
			errs = append(errs, fmt.Errorf("connector: closing transport %s: %w", at.name, err))
		}
	}
	return errors.Join(errs...)
}

// kindOf is the wire kind of err for handshake error replies.
func kindOf(err error) string { return errdefs.Kind(err) }

func remoteError(session string, er errorReply) error {
	return errdefs.Remote(fmt.Sprintf("connector: peer %s: %s", session, er.Error), er.Kind)
}

func contextError(err error) error { return errdefs.FromContext(err) }

// splitSession checks a session id (host:port) and returns its parts.
func splitSession(session string) (string, string, error) {
	host, port, err := net.SplitHostPort(session)
	if err != nil || host == "" || port == "" {
		return "", "", fmt.Errorf("connector: session id %q: want host:port, e.g. 10.0.0.2:15001: %w", session, ErrInvalidArgument)
	}
	return host, port, nil
}

// closeTimeout bounds closing a transport; a plugin that does not answer
// in time is killed.
const closeTimeout = 10 * time.Second

// closeBounded closes tr within closeTimeout (or ctx's earlier deadline).
func closeBounded(ctx context.Context, tr plugins.Transport) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
	defer cancel()
	return tr.Close(ctx)
}
