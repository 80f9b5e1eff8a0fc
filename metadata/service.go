package metadata

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/kvconnect/kvconnect/errdefs"
)

// Service is a node's client of a metadata service: it publishes the
// node's segment descriptor and RPC location under Mooncake's key layout
// (see Keys) so that Mooncake and kvconnect nodes can share one store, and
// resolves other segments' descriptors through a cache.
//
// Lifecycle: Open connects (or fails within Options.ConnectTimeout) and
// starts the background work: renewing this node's keys every TTL/3,
// watching or re-reading the cache, noticing that the service was lost
// and came back. Close stops all of it and removes this node's keys. No
// goroutine outlives Close.
//
// Concurrency: every method is safe for concurrent use. Calls after Close
// fail with errdefs.ErrClosed.
//
// Failure: once open, a Service keeps answering Resolve from its cache
// while the service is unreachable; it retries with backoff, logs the loss
// and the return once each, shows both in Status, and writes this node's
// keys again when the service is back if they are gone.
type Service interface {
	// Publish stores the descriptor of segment (the JSON bytes, as given:
	// a JSON object with a non-empty "name") at Keys.Segment and the RPC
	// location at Keys.RPC, under this node's lease: an etcd lease kept
	// alive, Redis keys with an expiry refreshed every TTL/3, HTTP entries
	// refreshed every TTL/3 that a kvconnect metadata server expires after
	// TTL. A node that dies without Close vanishes within TTL (plus, for
	// etcd, up to 0.5 s of the server's expiry check).
	//
	// Calling Publish again for the same segment replaces its descriptor
	// (regions changed); a Service may publish several segments. An error
	// means the keys may not be stored now (wrapping
	// errdefs.ErrPeerUnreachable when the service cannot be reached,
	// errdefs.ErrUnauthenticated when it refuses the credentials,
	// errdefs.ErrInvalidArgument for a bad segment, descriptor or
	// location); the segment stays recorded all the same and is written
	// when the service is reachable again, until Close.
	Publish(ctx context.Context, segment string, descriptor []byte, rpc RPCLocation) error

	// Resolve returns segment's descriptor, as stored. The first resolve
	// of a segment reads its key; the cache answers every later one
	// without a request. etcd: the key is then watched, so the cache
	// follows every change and Gone fires when the key is deleted or its
	// lease expires. Redis and HTTP: cached keys are re-read every
	// RefreshInterval, so a descriptor is at most that old.
	//
	// A missing key is an error wrapping errdefs.ErrUnknownPeer naming the
	// key; a value that is not a descriptor (not a JSON object with a
	// "name") wraps errdefs.ErrProtocol naming the key; when the key is
	// not cached and the service is unreachable the error wraps
	// errdefs.ErrPeerUnreachable. The returned slice is the caller's.
	Resolve(ctx context.Context, segment string) ([]byte, error)

	// ResolveRPC returns segment's RPC location (Mooncake's rpc_meta),
	// through the same cache, with the same errors.
	ResolveRPC(ctx context.Context, segment string) (RPCLocation, error)

	// Gone returns a channel that is closed when segment's descriptor key
	// disappears: deleted, or expired because its node died. It tracks
	// the descriptor Resolve last returned; a segment the Service has no
	// descriptor for (never resolved, or already gone) gets a closed
	// channel. A segment that reappears later gets a new channel from the
	// next Gone. After Close the channels of segments still present are
	// never closed: select on your own shutdown too.
	Gone(segment string) <-chan struct{}

	// Status reports the service's state and counters.
	Status() Status

	// Close stops the background work and removes this node's keys
	// (revokes its etcd lease, deletes its Redis and HTTP keys), bounded
	// by ctx and ConnectTimeout, or, when the service is already known to
	// be lost, by a third of TTL (one try, as a renewal). If the service
	// cannot be reached the keys expire within TTL; the error says so. Close is idempotent: later
	// calls return the first call's result.
	Close(ctx context.Context) error
}

// Status is a snapshot of a Service.
type Status struct {
	Backend Backend `json:"backend"`
	// URL is the connection string, password hidden.
	URL       string   `json:"url"`
	Endpoints []string `json:"endpoints"`
	// Prefix is the key prefix (mooncake/[cluster/]).
	Prefix string `json:"prefix"`
	// Connected is false while the service is lost; LostSince says since
	// when (zero while connected).
	Connected bool      `json:"connected"`
	LostSince time.Time `json:"lost_since,omitzero"`
	// RefusedSince is set while the service answers but refuses to store
	// or renew this node's keys (a full database, a read-only replica, a
	// revoked permission; LastError says which): since when. Unless it
	// accepts them again, they expire within TTL and peers lose this node.
	RefusedSince time.Time `json:"refused_since,omitzero"`
	// LastError is the latest failure talking to the service, at
	// LastErrorAt; it stays after the service came back.
	LastError   string    `json:"last_error,omitempty"`
	LastErrorAt time.Time `json:"last_error_at,omitzero"`
	// LeaseID is the etcd lease of this node's keys (0 when none).
	LeaseID int64 `json:"lease_id,omitempty"`
	// TTL is the lease TTL etcd granted, or the expiry of Redis and HTTP
	// keys.
	TTL time.Duration `json:"ttl"`
	// Published lists the segments this node publishes.
	Published []string `json:"published"`
	// Cached is the number of keys in the cache.
	Cached int `json:"cached"`
	Counters
	// ResolveLatency covers every Resolve and ResolveRPC (cache hits
	// included); PublishLatency every Publish.
	ResolveLatency Histogram `json:"resolve_latency"`
	PublishLatency Histogram `json:"publish_latency"`
}

// Open connects to the metadata service o.URL names and returns its
// Service. It fails within o.ConnectTimeout (and ctx) with an error naming
// every endpoint and the cause: wrapping errdefs.ErrInvalidArgument for
// bad options, errdefs.ErrPeerUnreachable when no endpoint answers,
// errdefs.ErrUnauthenticated when the service refuses the credentials or
// the TLS handshake fails. ctx bounds only Open; the Service runs until
// Close.
func Open(ctx context.Context, o Options) (Service, error) {
	s, err := resolveOptions(o)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.ConnectTimeout)
	defer cancel()
	switch s.target.Backend {
	case Etcd:
		return openEtcd(ctx, s)
	case Redis:
		return openRedis(ctx, s)
	case HTTP:
		return openHTTP(ctx, s)
	}
	return nil, fmt.Errorf("metadata: %w: backend %q", errdefs.ErrInternal, s.target.Backend)
}

// published is one segment this node publishes.
type published struct {
	descriptor []byte
	rpc        []byte
}

// entry is one cached key.
type entry struct {
	value []byte
	err   error // the value is not what the key should hold
	rev   int64 // etcd mod revision
	gone  chan struct{}
}

// core is what every backend shares: settings, counters, the cache with
// its Gone channels, the published segments and the connection state.
type core struct {
	*settings
	stats      counters
	resolveLat histogram
	publishLat histogram

	mu        sync.Mutex
	cache     map[string]*entry // by key
	published map[string]published
	connected bool
	lostSince time.Time
	// refusedSince: since when the service answers the renewals of this
	// node's keys with a refusal (zero while it stores them).
	refusedSince time.Time
	lastErr      error
	lastErrAt    time.Time
	leaseID      int64
	ttl          time.Duration
	dirty        bool // a Publish failed: its keys may not be stored
	closed       bool
	closeErr     error
	closeOnce    sync.Once
}

func newCore(s *settings) *core {
	return &core{settings: s, cache: map[string]*entry{}, published: map[string]published{}, connected: true, ttl: s.TTL}
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// checkPublish validates Publish's arguments and encodes the location.
func (c *core) checkPublish(segment string, descriptor []byte, rpc RPCLocation) (published, error) {
	bad := func(format string, args ...any) (published, error) {
		return published{}, fmt.Errorf("metadata: %w: publish %q: %s", errdefs.ErrInvalidArgument, segment, fmt.Sprintf(format, args...))
	}
	if segment == "" {
		return bad("empty segment name")
	}
	if strings.ContainsAny(segment, "\x00\r\n") {
		return bad("segment name holds a control character")
	}
	if _, err := DescriptorName(descriptor); err != nil {
		return bad("descriptor: %v", err)
	}
	if reason := rpc.check(); reason != "" {
		return bad("RPC location: %s", reason)
	}
	return published{descriptor: append([]byte(nil), descriptor...), rpc: rpc.Encode()}, nil
}

// record remembers a segment to publish; it fails after Close.
func (c *core) record(segment string, p published) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return c.errClosed()
	}
	c.published[segment] = p
	return nil
}

// publishedKVs lists every key this node publishes with its value.
func (c *core) publishedKVs() []kvPair {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]kvPair, 0, 2*len(c.published))
	for _, seg := range sortedSegments(c.published) {
		p := c.published[seg]
		out = append(out, kvPair{c.keys.Segment(seg), p.descriptor}, kvPair{c.keys.RPC(seg), p.rpc})
	}
	return out
}

func sortedSegments(m map[string]published) []string {
	out := make([]string, 0, len(m))
	for s := range m {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

type kvPair struct {
	key   string
	value []byte
}

func (c *core) errClosed() error {
	return fmt.Errorf("metadata: %w: %s", errdefs.ErrClosed, c.target)
}

// kind says what a key holds.
type kind int

const (
	kindDescriptor kind = iota
	kindRPC
)

// check validates a value read from key.
func check(k kind, key string, value []byte) error {
	var err error
	if k == kindRPC {
		_, err = DecodeRPCLocation(value)
	} else {
		_, err = DescriptorName(value)
	}
	if err != nil {
		return fmt.Errorf("metadata: key %s: %w", key, err)
	}
	return nil
}

// kindOf says what a key of the cluster holds.
func (c *core) kindOf(key string) kind {
	if strings.HasPrefix(key, c.keys.Prefix()+"rpc_meta/") {
		return kindRPC
	}
	return kindDescriptor
}

// lookup answers from the cache: the value (a copy) and whether the key
// was cached.
func (c *core) lookup(key string) ([]byte, bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.cache[key]
	if !ok {
		return nil, false, nil
	}
	if e.err != nil {
		return nil, true, e.err
	}
	return append([]byte(nil), e.value...), true, nil
}

// store puts a value read from the service into the cache (keeping an
// existing Gone channel) and returns its check error.
func (c *core) storeLocked(key string, value []byte, rev int64) *entry {
	e, ok := c.cache[key]
	if !ok {
		e = &entry{gone: make(chan struct{})}
		c.cache[key] = e
	}
	e.value, e.rev = value, rev
	e.err = check(c.kindOf(key), key, value)
	return e
}

// dropLocked removes a key from the cache and reports it gone.
func (c *core) dropLocked(key string) {
	e, ok := c.cache[key]
	if !ok {
		return
	}
	delete(c.cache, key)
	close(e.gone)
	if c.kindOf(key) == kindDescriptor {
		c.stats.gone.Add(1)
		c.log.Debug("segment gone", zap.String("key", key))
	}
}

// Gone implements Service.
func (c *core) Gone(segment string) <-chan struct{} {
	key := c.keys.Segment(segment)
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.cache[key]; ok {
		return e.gone
	}
	return closedChan
}

// missing is the error for a key the service does not hold.
func (c *core) missing(segment, key string) error {
	return fmt.Errorf("metadata: %w: segment %q: no key %s in %s", errdefs.ErrUnknownPeer, segment, key, c.target)
}

// unreachable is the error for a key that is not cached while the service
// is lost.
func (c *core) unreachableLocked(segment, key string) error {
	return fmt.Errorf("metadata: %w: segment %q: key %s is not cached and %s has been unreachable since %s: %v",
		errdefs.ErrPeerUnreachable, segment, key, c.target, c.lostSince.Format(time.RFC3339), c.lastErr)
}

// resolve is Resolve and ResolveRPC: the cache, then fetch.
func (c *core) resolve(ctx context.Context, segment string, k kind,
	fetch func(ctx context.Context, key string) ([]byte, error)) ([]byte, error) {
	start := time.Now()
	c.stats.resolves.Add(1)
	v, err := c.resolveValue(ctx, segment, k, fetch)
	c.resolveLat.observe(time.Since(start))
	if err != nil {
		c.stats.resolveErrors.Add(1)
	}
	return v, err
}

func (c *core) resolveValue(ctx context.Context, segment string, k kind,
	fetch func(ctx context.Context, key string) ([]byte, error)) ([]byte, error) {
	key := c.keys.Segment(segment)
	if k == kindRPC {
		key = c.keys.RPC(segment)
	}
	if segment == "" {
		return nil, fmt.Errorf("metadata: %w: empty segment name", errdefs.ErrInvalidArgument)
	}
	c.mu.Lock()
	closed, connected := c.closed, c.connected
	var lostErr error
	if !connected {
		lostErr = c.unreachableLocked(segment, key)
	}
	c.mu.Unlock()
	if closed {
		return nil, c.errClosed()
	}
	if v, ok, err := c.lookup(key); ok {
		c.stats.cacheHits.Add(1)
		return v, err
	}
	if !connected {
		return nil, lostErr
	}
	v, err := fetch(ctx, key)
	if err != nil {
		return nil, err
	}
	if v == nil {
		return nil, c.missing(segment, key)
	}
	return v, nil
}

// request runs one request to the service with the per-request timeout,
// counts it, and tracks the connection state: a transient failure marks
// the service lost (logged once), a success marks it back.
func (c *core) request(ctx context.Context, what string, transient func(error) bool, f func(ctx context.Context) error) error {
	timeout := c.ConnectTimeout
	if ctx.Value(backgroundKey{}) != nil || (ctx.Value(closingKey{}) != nil && !c.isConnected()) {
		// Renewals must fail in time to retry before the keys expire.
		// Close, when the service is already lost, tries once as a
		// renewal would: the keys expire within TTL anyway, and a node
		// shutting down should not wait ConnectTimeout on a service
		// known to be gone.
		timeout = max(min(timeout, c.renew), 100*time.Millisecond)
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c.stats.requests.Add(1)
	err := f(rctx)
	if err == nil {
		c.markOK()
		if ctx.Value(keepingKey{}) != nil {
			c.markKept()
		}
		return nil
	}
	c.stats.requestErrors.Add(1)
	if ctx.Err() != nil { // the caller gave up: says nothing about the service
		return err
	}
	lost := transient(err)
	c.markFailed(what, err, lost)
	if !lost && ctx.Value(keepingKey{}) != nil {
		c.markRefused(what, err)
	}
	return err
}

// keepingKey marks the context of the background work that keeps this
// node's keys stored (renewals, the puts a failed Publish left), whose
// refusals Status reports (RefusedSince).
type keepingKey struct{}

// keeping marks ctx as the keeping of this node's keys.
func keeping(ctx context.Context) context.Context {
	return context.WithValue(ctx, keepingKey{}, true)
}

// markRefused records that the service answered the keeping of this
// node's keys with a refusal (a full database, a read-only replica, a
// revoked permission): unless it accepts them again within TTL, they
// expire and peers lose this node. Logged when it starts.
func (c *core) markRefused(what string, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.refusedSince.IsZero() || c.closed {
		return
	}
	c.refusedSince = time.Now()
	c.log.Warn("the metadata service refuses to keep this node's keys: they expire within the TTL unless it accepts them again; retrying with backoff",
		zap.Strings("endpoints", c.target.Endpoints), zap.String("op", what), zap.Duration("ttl", c.ttl), zap.Error(err))
}

// markKept records that the service stored or renewed this node's keys.
func (c *core) markKept() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.refusedSince.IsZero() {
		return
	}
	if !c.closed {
		c.log.Info("the metadata service keeps this node's keys again", zap.Duration("refused_for", time.Since(c.refusedSince).Round(time.Millisecond)))
	}
	c.refusedSince = time.Time{}
}

// backgroundKey marks the context of the background work, whose requests
// are bounded by TTL/3 as well as ConnectTimeout.
type backgroundKey struct{}

// closingKey marks the context of Close's removal of this node's keys.
type closingKey struct{}

// closing marks ctx as Close's: while the service is lost its request is
// bounded like a renewal's.
func closing(ctx context.Context) context.Context {
	return context.WithValue(ctx, closingKey{}, true)
}

// isConnected reports whether the service answered last.
func (c *core) isConnected() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.connected
}

// background returns the context of a Service's background work: canceled
// by Close.
func background() (context.Context, context.CancelFunc) {
	return context.WithCancel(context.WithValue(context.Background(), backgroundKey{}, true))
}

// markOK records that the service answered.
func (c *core) markOK() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.connected {
		return
	}
	c.connected = true
	if !c.closed {
		c.log.Info("metadata service is back", zap.Duration("down", time.Since(c.lostSince).Round(time.Millisecond)))
	}
	c.lostSince = time.Time{}
}

// markFailed records a failure; lost says the service is unreachable.
func (c *core) markFailed(what string, err error, lost bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lastErr, c.lastErrAt = fmt.Errorf("%s: %w", what, err), time.Now()
	if !lost || !c.connected || c.closed {
		return
	}
	c.connected = false
	c.lostSince = c.lastErrAt
	c.stats.outages.Add(1)
	c.log.Warn("metadata service lost; serving cached descriptors and retrying with backoff",
		zap.Strings("endpoints", c.target.Endpoints), zap.String("op", what), zap.Error(err))
}

// status fills the shared fields of Status.
func (c *core) status() Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := Status{
		Backend: c.target.Backend, URL: c.target.String(), Endpoints: append([]string(nil), c.target.Endpoints...),
		Prefix: c.keys.Prefix(), Connected: c.connected, LostSince: c.lostSince, RefusedSince: c.refusedSince, LastErrorAt: c.lastErrAt,
		LeaseID: c.leaseID, TTL: c.ttl, Published: sortedSegments(c.published), Cached: len(c.cache),
		Counters: c.stats.snapshot(), ResolveLatency: c.resolveLat.snapshot(), PublishLatency: c.publishLat.snapshot(),
	}
	if c.lastErr != nil {
		st.LastError = c.lastErr.Error()
	}
	return st
}

// backoff is a retry delay doubling from 100 ms up to max.
type backoff struct {
	next, max time.Duration
}

func newBackoff(max time.Duration) *backoff {
	return &backoff{next: 100 * time.Millisecond, max: max}
}

func (b *backoff) delay() time.Duration {
	d := b.next
	b.next = min(2*b.next, b.max)
	return min(d, b.max)
}

func (b *backoff) reset() { b.next = 100 * time.Millisecond }

// sleep waits d or until ctx is done (false then).
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// isTimeout says whether err is a deadline.
func isTimeout(err error) bool { return errors.Is(err, context.DeadlineExceeded) }
