// Package tcp is kvconnect's pure-Go TCP transport, the one that runs
// everywhere and ends every fallback chain.
//
// Framing is internal/wire: a fixed 40-byte header per request. Each peer
// gets several connections (transports.tcp.connections); ops larger than
// chunk_size are split into chunks striped across them, requests are
// pipelined, and payload moves between the socket and region memory
// without intermediate buffers (the small receive buffer only batches
// headers). The side that owns the memory checks every request against its
// registered regions and answers bad ones with an error status.
package tcp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/kvconnect/kvconnect/auth"
	"github.com/kvconnect/kvconnect/internal/prefault"
	"github.com/kvconnect/kvconnect/internal/ratelog"
	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/plugins/regions"
	"github.com/kvconnect/kvconnect/transports/names"
)

// Name is the transport's name in configs and descriptors.
const Name = names.TCP

// Version is the transport implementation's version.
const Version = "0.1.0"

var _ plugins.Transport = (*Transport)(nil)

// Transport is the TCP transport. The zero value is not usable; call New.
type Transport struct {
	guard   plugins.Guard
	mu      sync.Mutex
	opts    Options
	log     *zap.Logger
	ln      net.Listener
	peers   map[plugins.PeerID]*peer
	mcpeers map[plugins.PeerID]*mcPeer // Mooncake Transfer Engine peers
	nextID  plugins.PeerID
	targets map[*targetConn]struct{}
	servers servers // goroutines serving targets

	regions regions.Table
	order   mooncakeOrder    // v1 read-after-write across Mooncake connections
	warn    *ratelog.Limiter // lines remote peers can trigger, rate-limited
	auth    *auth.Keyring    // nil: authentication off
	served  served           // what peers were served (Stats)
	wg      sync.WaitGroup   // accept loop, servers, watchdog
	stop    chan struct{}
}

// New returns a TCP transport. It does nothing until Init.
func New() *Transport {
	return &Transport{
		log:     zap.NewNop(),
		warn:    ratelog.New(zap.NewNop(), time.Second),
		peers:   map[plugins.PeerID]*peer{},
		mcpeers: map[plugins.PeerID]*mcPeer{},
		targets: map[*targetConn]struct{}{},
		stop:    make(chan struct{}),
		servers: servers{handoff: make(chan *targetConn)},
	}
}

// Info describes the transport.
func (t *Transport) Info(ctx context.Context) (plugins.Info, error) {
	return plugins.Info{
		Name:         Name,
		Version:      Version,
		APIVersion:   plugins.APIVersion,
		Capabilities: plugins.CapRead | plugins.CapWrite | plugins.CapAbsoluteAddress | plugins.CapAuthenticates,
	}, nil
}

// Init parses the options, binds the data listener and starts serving.
func (t *Transport) Init(ctx context.Context, req plugins.InitRequest) (plugins.InitResult, error) {
	opts, err := decodeOptions(req.Options)
	if err != nil {
		return plugins.InitResult{}, initError(plugins.StepConfigure, err.Error(), err)
	}
	if err := t.guard.BeginInit(Name); err != nil {
		return plugins.InitResult{}, err
	}
	if req.Logger != nil {
		t.log = req.Logger
	}
	t.warn = ratelog.New(t.log, 10*time.Second)
	// The data port binds where the node's RPC port does unless
	// transports.tcp.bind_address (MC_TCP_BIND_ADDRESS) says otherwise.
	bindAddr := opts.BindAddress
	if bindAddr == "" {
		bindAddr = req.BindAddress
	}
	bind := net.JoinHostPort(bindAddr, strconv.Itoa(opts.Port))
	lc := listenConfig()
	ln, err := lc.Listen(ctx, "tcp", bind)
	if err != nil {
		ie := initError(plugins.StepBind, fmt.Sprintf("cannot listen on %s: %v", bind, err), fmt.Errorf("%w: %w", plugins.ErrUnavailable, err))
		ie.Hints = []string{"set transports.tcp.port to a free port or 0", "check transports.tcp.bind_address (MC_TCP_BIND_ADDRESS) names an address of this host"}
		t.guard.EndInit(Name, false)
		return plugins.InitResult{}, ie
	}
	if req.Auth != nil && opts.Mooncake {
		// Mooncake peers cannot authenticate.
		opts.Mooncake = false
		t.log.Info("tcp: Mooncake's TCP protocol is off: authentication is on and Mooncake peers cannot authenticate")
	}
	t.mu.Lock()
	// Before the transport is up: calls that pass the guard read these
	// without the lock.
	t.opts = opts
	t.auth = req.Auth
	if err := t.guard.EndInit(Name, true); err != nil {
		t.mu.Unlock()
		ln.Close() // Close came while Init ran
		return plugins.InitResult{}, err
	}
	t.ln = ln
	t.order.listen(ln)
	t.wg.Add(2)
	go t.acceptLoop(ln)
	go t.watchdog()
	t.mu.Unlock()
	port := ln.Addr().(*net.TCPAddr).Port
	host := advertisedHost(req.Hostname, ln.Addr().(*net.TCPAddr).IP)
	endpoint := net.JoinHostPort(host, strconv.Itoa(port))
	t.log.Info("tcp transport up", zap.String("listen", ln.Addr().String()), zap.String("endpoint", endpoint),
		zap.Int("connections", opts.Connections), zap.Uint64("chunk_size", uint64(opts.ChunkSize)), zap.Stringer("auth", req.Auth))
	return plugins.InitResult{Endpoint: []byte(endpoint), Summary: "tcp " + endpoint}, nil
}

// advertisedHost picks the host peers should dial: the configured hostname
// (without any :port suffix), else the bound IP, else loopback.
func advertisedHost(hostname string, bound net.IP) string {
	if hostname != "" {
		if h, _, err := net.SplitHostPort(hostname); err == nil {
			return h
		}
		return hostname
	}
	if bound != nil && !bound.IsUnspecified() {
		return bound.String()
	}
	return "127.0.0.1"
}

func initError(step, cause string, err error) *plugins.InitError {
	return &plugins.InitError{Transport: Name, Step: step, Cause: cause, Err: err}
}

// RegisterRegion makes r's memory available to local ops and to peers.
// Unless transports.tcp.prefault is false, it first has the kernel read
// a byte of every page (internal/prefault), the memory its socket copies
// will use, so the region's first ops run at the speed of the next ones
// (on the VM where that was measured, the same 6 µs a page moves from
// each page's first op to here). That takes at most half of the time
// left before ctx's deadline, so a registration with a deadline (a
// plugin's restart re-registers every region within one) still finishes;
// the pages left unread are only slower in their first op.
func (t *Transport) RegisterRegion(ctx context.Context, r plugins.Region) ([]byte, error) {
	if err := t.guard.Up(Name); err != nil {
		return nil, err
	}
	if t.opts.Prefault {
		t.prefault(ctx, r)
	}
	if err := t.regions.Add(uint64(r.ID), r.Addr, r.Mem); err != nil {
		return nil, fmt.Errorf("tcp: register: %w", err)
	}
	return nil, nil
}

// prefault reads r's pages from kernel mode, within half of ctx's time.
func (t *Transport) prefault(ctx context.Context, r plugins.Region) {
	start := time.Now()
	if dl, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, halfway(start, dl))
		defer cancel()
	}
	pages, err := prefault.ForKernel(ctx, r.Mem)
	took := time.Since(start)
	log := t.log.Debug
	if took >= slowPrefault {
		// Slow enough to be a node's visible start-up time: say why.
		log = t.log.Info
	}
	log("tcp: region prefaulted for the kernel's copies (transports.tcp.prefault; false leaves this cost to each page's first transfer)",
		zap.Uint64("region", uint64(r.ID)), zap.Int("bytes", len(r.Mem)), zap.Int("pages", pages), zap.Duration("took", took), zap.Error(err))
}

// slowPrefault is how long a region's prefault takes before it is
// logged at info rather than debug level.
var slowPrefault = time.Second

// halfway is the time halfway from now to deadline (now when the
// deadline has passed).
func halfway(now, deadline time.Time) time.Time {
	if !deadline.After(now) {
		return now
	}
	return now.Add(deadline.Sub(now) / 2)
}

// DeregisterRegion waits for ops on the region to end, then forgets it.
func (t *Transport) DeregisterRegion(ctx context.Context, id plugins.RegionID) error {
	if err := t.guard.Up(Name); err != nil {
		return err
	}
	if err := t.regions.Remove(ctx, uint64(id)); err != nil {
		return fmt.Errorf("tcp: deregister: %w", err)
	}
	return nil
}

// Connect dials the peer's data endpoint with every connection.
func (t *Transport) Connect(ctx context.Context, info plugins.PeerInfo) (plugins.PeerID, error) {
	if mcAddr, v2, isMooncake, err := parseMooncakeEndpoint(info.Endpoint); isMooncake {
		if err != nil {
			return 0, err
		}
		if t.auth != nil {
			return 0, fmt.Errorf("tcp: peer %s is a Mooncake Transfer Engine, which cannot authenticate, and this node has authentication on: %w", info.Name, plugins.ErrUnauthenticated)
		}
		return t.connectMooncake(ctx, info, mcAddr, v2)
	}
	addr := string(info.Endpoint)
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return 0, fmt.Errorf("tcp: peer %q endpoint %q is not host:port: %w", info.Name, addr, plugins.ErrInvalidArgument)
	}
	t.mu.Lock()
	if err := t.guard.Up(Name); err != nil {
		t.mu.Unlock()
		return 0, err
	}
	t.nextID++
	p := newPeer(t, t.nextID, info.Name, addr)
	t.mu.Unlock()
	if err := p.dialAll(ctx); err != nil {
		p.close(plugins.ErrClosed)
		return 0, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.guard.Up(Name); err != nil {
		p.close(plugins.ErrClosed)
		return 0, err
	}
	t.peers[p.id] = p
	return p.id, nil
}

// Disconnect closes a peer; ops in flight to it fail with ErrClosed.
func (t *Transport) Disconnect(ctx context.Context, id plugins.PeerID) error {
	if err := t.guard.Up(Name); err != nil {
		return err
	}
	t.mu.Lock()
	p, ok := t.peers[id]
	delete(t.peers, id)
	mp, isMooncake := t.mcpeers[id]
	delete(t.mcpeers, id)
	t.mu.Unlock()
	if isMooncake {
		mp.close(fmt.Errorf("tcp: Mooncake peer %s disconnected: %w", mp.name, plugins.ErrClosed))
		return nil
	}
	if !ok {
		return fmt.Errorf("tcp: peer %d: %w", id, plugins.ErrUnknownPeer)
	}
	p.close(fmt.Errorf("tcp: peer %s disconnected: %w", p.name, plugins.ErrClosed))
	return nil
}

// Close stops serving, fails ops in flight, and forgets all regions. It is
// idempotent.
func (t *Transport) Close(ctx context.Context) error {
	t.mu.Lock()
	first, wasUp := t.guard.BeginClose()
	if !first {
		t.mu.Unlock()
		return nil
	}
	peers := t.peers
	t.peers = map[plugins.PeerID]*peer{}
	mcpeers := t.mcpeers
	t.mcpeers = map[plugins.PeerID]*mcPeer{}
	targets := t.targets
	t.targets = map[*targetConn]struct{}{}
	ln := t.ln
	t.mu.Unlock()

	close(t.stop)
	var errs []error
	if ln != nil {
		if err := ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			errs = append(errs, err)
		}
	}
	closedErr := fmt.Errorf("tcp: transport closed: %w", plugins.ErrClosed)
	for _, p := range peers {
		p.close(closedErr)
	}
	for _, p := range mcpeers {
		p.close(closedErr)
	}
	for tc := range targets {
		tc.nc.Close()
	}
	t.wg.Wait()
	if err := t.regions.RemoveAll(ctx); err != nil {
		errs = append(errs, err)
	}
	if wasUp {
		t.log.Info("tcp transport closed")
	}
	return errors.Join(errs...)
}

// watchdog fails connections that have work outstanding but made no
// progress for op_timeout: the peer is dead or wedged.
func (t *Transport) watchdog() {
	defer t.wg.Done()
	timeout := time.Duration(t.opts.OpTimeout)
	tick := max(timeout/8, 5*time.Millisecond)
	tk := time.NewTicker(tick)
	defer tk.Stop()
	for {
		select {
		case <-t.stop:
			return
		case now := <-tk.C:
			t.mu.Lock()
			var conns []*conn
			for _, p := range t.peers {
				conns = p.appendConns(conns)
			}
			t.mu.Unlock()
			for _, c := range conns {
				c.checkStalled(now, timeout)
			}
		}
	}
}

func (t *Transport) peer(id plugins.PeerID) (*peer, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.guard.Up(Name); err != nil {
		return nil, err
	}
	p, ok := t.peers[id]
	if !ok {
		return nil, fmt.Errorf("tcp: peer %d: %w", id, plugins.ErrUnknownPeer)
	}
	return p, nil
}
