package connector

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/kvconnect/kvconnect/auth"
	"github.com/kvconnect/kvconnect/config"
	"github.com/kvconnect/kvconnect/errdefs"
	"github.com/kvconnect/kvconnect/internal/shm"
	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/plugins/regions"
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

// Connector is one kvconnect node. It is safe for concurrent use; Close
// and Shutdown may be called at any time.
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
	frames     *frameBudget // memory for handshake frames being received (max_handshake_memory)
	session    string       // this node's session id, host:port of the RPC port
	rpcPort    int          // the port the RPC listener bound
	// hostnameNote says how the hostname was chosen when it was not set.
	hostnameNote string
	hostID       string
	started      time.Time
	auth         *auth.Keyring // nil: authentication off
	meta         *metaState    // nil: P2P handshake (no metadata service)
	metrics      *nodeMetrics  // nil: metrics off (metrics.go)

	// regLock (lockRegions) orders region (de)registration with plugin
	// restarts, so a restarted transport gets every region. A channel, so
	// a caller waiting behind a wedged plugin gives up when its ctx ends.
	regLock chan struct{}

	pool  *shm.Pool // the memory Alloc hands out
	views fileViews // the caller files RegisterFile mapped

	mu           sync.Mutex
	closed       bool
	regions      map[RegionID]*Region
	draining     map[RegionID]*Region // freed, but a transport may still use them
	local        regions.Table        // the regions, for lookups by address
	nextRegion   RegionID
	peers        map[string]*Peer
	notify       chan Notification
	wg           sync.WaitGroup
	closing      chan struct{} // closed when Shutdown begins
	shutdownDone chan struct{} // closed when the first Shutdown returns
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
	keys, err := cfg.Keyring()
	if err != nil {
		return nil, err
	}
	if keys != nil && cfg.MooncakeInterop == nil {
		cfg.MooncakeInterop = config.Bool(false) // Mooncake peers cannot authenticate
		cfg.Notes = append(cfg.Notes, "mooncake_interop is off: auth is on and Mooncake peers cannot authenticate")
	}
	cfg = cfg.WithDefaults()
	c := &Connector{auth: keys,
		cfg: cfg, opts: o, log: o.log, started: time.Now(), pool: shm.NewPool("", shm.DefaultSlabSize),
		regions: map[RegionID]*Region{}, draining: map[RegionID]*Region{}, peers: map[string]*Peer{},
		notify: make(chan Notification, 1024), closing: make(chan struct{}), shutdownDone: make(chan struct{}),
		regLock: make(chan struct{}, 1),
	}
	c.hostID = hostID()
	c.frames = newFrameBudget(c.cfg.MaxHandshakeMemory)
	if c.cfg.Hostname == "" {
		var how string
		c.cfg.Hostname, how = OutwardAddress()
		c.hostnameNote = fmt.Sprintf("hostname %s: %s", c.cfg.Hostname, how)
		if net.ParseIP(c.cfg.Hostname).IsLoopback() {
			c.log.Warn("no outward address found; peers on other hosts cannot reach this node", zap.String("hostname", c.cfg.Hostname), zap.String("why", how))
		} else {
			c.log.Debug("hostname not set: using the outward address", zap.String("hostname", c.cfg.Hostname), zap.String("how", how))
		}
	} else if err := resolveHostname(ctx, c.cfg.Hostname, c.cfg.ConnectTimeout); err != nil {
		return nil, err
	}
	// The RPC port is bound first: a port that is taken fails New at once,
	// before any plugin starts.
	ln, err := c.listenRPC()
	if err != nil {
		return nil, err
	}
	if err := c.metricsStart(); err != nil {
		ln.Close()
		return nil, err
	}
	// The metadata service next: unreachable, it fails New within
	// connect_timeout, before any plugin starts.
	if err := c.openMetadata(ctx); err != nil {
		c.metricsAbort()
		ln.Close()
		return nil, err
	}
	if err := c.startChain(ctx); err != nil {
		ln.Close()
		c.closeMetadata(context.Background())
		c.metricsAbort()
		return nil, err
	}
	c.serveRPC(ln)
	c.startPublishing(ctx)
	c.metricsUp()
	names := make([]string, len(c.transports))
	for i, at := range c.transports {
		names[i] = at.name
	}
	c.log.Info("kvconnect node up", zap.String("session", c.session), zap.Strings("transports", names),
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

// listenRPC binds the RPC (handshake) port and sets the session id.
func (c *Connector) listenRPC() (net.Listener, error) {
	if c.opts.segment != "" && c.cfg.Metadata == MetadataP2P {
		return nil, fmt.Errorf("connector: segment name %q: a segment name of its own needs a metadata service (metadata is %s, where the segment name is host:port): %w", c.opts.segment, MetadataP2P, ErrInvalidArgument)
	}
	var ln net.Listener
	var err error
	if c.cfg.RPCPort == 0 && (c.opts.portMin != 0 || c.opts.portMax != 0) {
		ln, err = c.listenInRange()
	} else {
		addr := net.JoinHostPort(c.cfg.BindAddress, strconv.Itoa(c.cfg.RPCPort))
		if ln, err = net.Listen("tcp", addr); err != nil {
			err = listenError("the RPC (handshake) port", "rpc_port", addr, err)
		}
	}
	if err != nil {
		return nil, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	c.rpcPort = port
	c.session = net.JoinHostPort(c.cfg.Hostname, strconv.Itoa(port))
	if c.opts.segment != "" {
		c.session = c.opts.segment
	}
	return ln, nil
}

// listenInRange binds a random free port of WithRPCPortRange's range:
// random ports first (as Mooncake does), then every port in order, so a
// nearly full range still finds its free port.
func (c *Connector) listenInRange() (net.Listener, error) {
	lo, hi := c.opts.portMin, c.opts.portMax
	if lo < 1 || hi > 65535 || lo > hi {
		return nil, fmt.Errorf("connector: RPC port range %d-%d: must be within 1-65535, low end first (MC_MIN_RPC_PORT, MC_MAX_RPC_PORT): %w", lo, hi, ErrInvalidArgument)
	}
	try := func(port int) (net.Listener, error) {
		return net.Listen("tcp", net.JoinHostPort(c.cfg.BindAddress, strconv.Itoa(port)))
	}
	n := hi - lo + 1
	for i := 0; i < min(n, 32); i++ {
		if ln, err := try(lo + rand.IntN(n)); err == nil {
			return ln, nil
		}
	}
	var last error
	for port := lo; port <= hi; port++ {
		ln, err := try(port)
		if err == nil {
			return ln, nil
		}
		last = err
	}
	return nil, fmt.Errorf("connector: no free RPC (handshake) port in %d-%d on %q (widen MC_MIN_RPC_PORT/MC_MAX_RPC_PORT or set rpc_port): %v: %w", lo, hi, c.cfg.BindAddress, last, ErrUnavailable)
}

// serveRPC answers handshakes on ln.
func (c *Connector) serveRPC(ln net.Listener) {
	c.rpc = newRPCServer(c, ln)
	c.rpc.wg.Add(1)
	go c.rpc.serve()
}

// SessionID is this node's session id: host:port of its RPC port, which
// peers pass to Open (Mooncake's segment name).
func (c *Connector) SessionID() string { return c.session }

// Transport is the name of the preferred active transport.
func (c *Connector) Transport() string { return c.primary().name }

// usable returns an error if the node cannot take new work.
func (c *Connector) usable() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return fmt.Errorf("connector: %w", ErrClosed)
	}
	return nil
}

// lockRegions takes the region lock, or gives up when ctx ends.
func (c *Connector) lockRegions(ctx context.Context) error {
	select {
	case c.regLock <- struct{}{}: // free: taken, whatever ctx says
		return nil
	default:
	}
	select {
	case c.regLock <- struct{}{}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("connector: waiting for another region (de)registration or a plugin restart to finish: %w", contextError(ctx.Err()))
	}
}

func (c *Connector) unlockRegions() { <-c.regLock }

// usableOn returns an error if transport at cannot take new work.
func (c *Connector) usableOn(at *activeTransport) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return fmt.Errorf("connector: %w", ErrClosed)
	}
	return at.crashed
}

func (c *Connector) withTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok || d <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, d)
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
