package metadata

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kvconnect/kvconnect/errdefs"
)

// etcdService is the etcd backend. A resolved key is cached and watched
// (one watch per key, from the revision it was read at), so later resolves
// cost no request and its deletion is seen at once; a key never resolved
// costs nothing, so publishing stays cheap however many nodes there are.
// This node's keys are put under one lease that a supervisor renews every
// TTL/3 with KeepAliveOnce; a lease etcd no longer knows is granted again
// and the keys are put again.
type etcdService struct {
	*core
	cli    *clientv3.Client
	ctx    context.Context // background work; canceled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // the supervisor and every key's watch
	pubMu  sync.Mutex     // serializes lease grants and puts of published keys
	kick   chan struct{}
}

var _ Service = (*etcdService)(nil)

func openEtcd(ctx context.Context, s *settings) (Service, error) {
	var tlsCfg *tls.Config
	if s.TLS.Set() {
		cfg, err := s.TLS.Config()
		if err != nil {
			return nil, err
		}
		tlsCfg = cfg
	}
	if err := probeEndpoints(ctx, s, tlsCfg); err != nil {
		return nil, err
	}
	deadline, _ := ctx.Deadline()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   s.target.Endpoints,
		DialTimeout: max(time.Until(deadline), time.Millisecond),
		TLS:         tlsCfg,
		Username:    s.Username,
		Password:    string(s.Password),
		Logger:      zap.NewNop(), // it logs every retry; this package logs state changes once
		Context:     context.Background(),
	})
	if err != nil {
		return nil, etcdOpenError(s, err)
	}
	bg, cancel := background()
	e := &etcdService{core: newCore(s), cli: cli, ctx: bg, cancel: cancel, kick: make(chan struct{}, 1)}
	// A count of the prefix proves etcd answers, the credentials work and
	// the user may read the prefix.
	var resp *clientv3.GetResponse
	err = e.request(ctx, "count "+s.keys.Prefix(), etcdTransient, func(ctx context.Context) error {
		var err error
		resp, err = cli.Get(ctx, s.keys.Prefix(), clientv3.WithPrefix(), clientv3.WithCountOnly())
		return err
	})
	if err != nil {
		cancel()
		cli.Close()
		return nil, etcdOpenError(s, err)
	}
	e.wg.Add(1)
	go e.supervise()
	s.log.Debug("connected", zap.Int64("revision", resp.Header.Revision), zap.Int64("keys", resp.Count))
	return e, nil
}

// probeEndpoints dials every endpoint (with the TLS handshake when TLS is
// on), because the etcd client reports an unreachable or misconfigured
// server only as a deadline. It fails when none answers, naming each
// endpoint's cause.
func probeEndpoints(ctx context.Context, s *settings, tlsCfg *tls.Config) error {
	eps := s.target.Endpoints
	errs := make([]error, len(eps))
	var wg sync.WaitGroup
	for i, ep := range eps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = probe(ctx, ep, tlsCfg)
		}()
	}
	wg.Wait()
	var msgs []string
	auth := false
	for i, err := range errs {
		if err == nil {
			return nil
		}
		auth = auth || errors.Is(err, errdefs.ErrUnauthenticated)
		msgs = append(msgs, eps[i]+": "+err.Error())
	}
	sentinel := errdefs.ErrPeerUnreachable
	if auth {
		sentinel = errdefs.ErrUnauthenticated
	}
	return fmt.Errorf("metadata: %w: etcd %s: no endpoint answered within %s: %s",
		sentinel, strings.Join(eps, ","), s.ConnectTimeout, strings.Join(msgs, "; "))
}

// probe dials one endpoint. With TLS it completes the handshake and waits
// briefly for the server's verdict on the client certificate (TLS 1.3
// sends it after the client's handshake is done).
func probe(ctx context.Context, ep string, tlsCfg *tls.Config) error {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", ep)
	if err != nil {
		return cleanDialError(err)
	}
	defer nc.Close()
	if tlsCfg == nil {
		return nil
	}
	cfg := tlsCfg.Clone()
	if cfg.ServerName == "" {
		host, _, _ := net.SplitHostPort(ep)
		cfg.ServerName = host
	}
	cfg.NextProtos = []string{"h2"}
	tc := tls.Client(nc, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		return tlsError(err)
	}
	_ = tc.SetReadDeadline(time.Now().Add(150 * time.Millisecond))
	var b [1]byte
	if _, err := tc.Read(b[:]); err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return nil // no alert: the server accepted us and waits for a request
		}
		return tlsError(err)
	}
	return nil
}

// tlsError classifies a TLS failure: the certificates did not match, so
// ErrUnauthenticated, with a hint.
func tlsError(err error) error {
	var ce *tls.CertificateVerificationError
	var rh tls.RecordHeaderError
	var oe *net.OpError
	switch {
	case errors.As(err, &ce):
		return fmt.Errorf("%w: TLS: the server's certificate is not trusted (check the CA file): %v", errdefs.ErrUnauthenticated, err)
	case errors.As(err, &oe) && oe.Op == "remote error":
		return fmt.Errorf("%w: TLS: the server refused the handshake (it may require a client certificate: check the certificate and key files): %v", errdefs.ErrUnauthenticated, err)
	case errors.As(err, &rh), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		// A plain server that closes on a ClientHello it has not read
		// (etcd does, when it is slow to) resets the connection instead.
		errors.Is(err, syscall.ECONNRESET):
		return fmt.Errorf("%w: TLS: the server does not speak TLS on this port (%v)", errdefs.ErrUnauthenticated, err)
	}
	return fmt.Errorf("TLS handshake: %w", err)
}

// cleanDialError drops the "dial tcp" noise but keeps the cause.
func cleanDialError(err error) error {
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Err != nil {
		return oe.Err
	}
	return err
}

// etcdOpenError turns an error from the client during Open into ours.
func etcdOpenError(s *settings, err error) error {
	eps := strings.Join(s.target.Endpoints, ",")
	switch {
	case errors.Is(err, rpctypes.ErrAuthFailed):
		return fmt.Errorf("metadata: %w: etcd %s refused user %q: wrong user name or password (%v)", errdefs.ErrUnauthenticated, eps, s.Username, err)
	case errors.Is(err, rpctypes.ErrUserEmpty):
		return fmt.Errorf("metadata: %w: etcd %s has authentication enabled: set the user name and password (%v)", errdefs.ErrUnauthenticated, eps, err)
	case errors.Is(err, rpctypes.ErrPermissionDenied):
		return fmt.Errorf("metadata: %w: etcd %s: user %q may not read %s: grant it read/write on that prefix (%v)",
			errdefs.ErrUnauthenticated, eps, s.Username, s.keys.Prefix(), err)
	case errors.Is(err, rpctypes.ErrAuthNotEnabled):
		return fmt.Errorf("metadata: %w: etcd %s: a user name was given but authentication is not enabled on the server (%v)", errdefs.ErrInvalidArgument, eps, err)
	case isTimeout(err) || status.Code(err) == codes.Unavailable:
		return fmt.Errorf("metadata: %w: etcd %s did not answer within %s: %v", errdefs.ErrPeerUnreachable, eps, s.ConnectTimeout, err)
	}
	return fmt.Errorf("metadata: %w: etcd %s: %v", errdefs.ErrPeerUnreachable, eps, err)
}

// etcdTransient says whether an error means etcd could not be reached.
func etcdTransient(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded:
		return true
	}
	return isTimeout(err) || errors.Is(err, rpctypes.ErrNoLeader) || errors.Is(err, rpctypes.ErrTimeout) ||
		errors.Is(err, rpctypes.ErrTimeoutDueToLeaderFail) || errors.Is(err, rpctypes.ErrTimeoutDueToConnectionLost)
}

// wrapEtcd turns a request error into ours, naming the key.
func (e *etcdService) wrapEtcd(what, key string, err error) error {
	sentinel := errdefs.ErrPeerUnreachable
	switch {
	case errors.Is(err, rpctypes.ErrPermissionDenied), errors.Is(err, rpctypes.ErrUserEmpty),
		errors.Is(err, rpctypes.ErrAuthFailed), errors.Is(err, rpctypes.ErrInvalidAuthToken):
		sentinel = errdefs.ErrUnauthenticated
	case errors.Is(err, context.Canceled):
		sentinel = errdefs.ErrCanceled
	case errors.Is(err, rpctypes.ErrRequestTooLarge):
		return fmt.Errorf("metadata: %w: etcd %s: %s %s: %v (etcd's --max-request-bytes, 1.5 MiB by default, bounds a descriptor: fewer, larger regions make a smaller one)",
			errdefs.ErrResourceExhausted, strings.Join(e.target.Endpoints, ","), what, key, err)
	case status.Code(err) == codes.ResourceExhausted:
		// The client refused to send it: over its own 2 MiB request limit.
		return fmt.Errorf("metadata: %w: etcd %s: %s %s: %v (the etcd client sends at most 2 MiB in one request: fewer, larger regions make a smaller descriptor)",
			errdefs.ErrResourceExhausted, strings.Join(e.target.Endpoints, ","), what, key, err)
	case errors.Is(err, rpctypes.ErrNoSpace):
		return fmt.Errorf("metadata: %w: etcd %s: %s %s: %v (etcd's database reached its quota: compact and defragment it, then disarm the NOSPACE alarm)",
			errdefs.ErrResourceExhausted, strings.Join(e.target.Endpoints, ","), what, key, err)
	}
	return fmt.Errorf("metadata: %w: etcd %s: %s %s: %v", sentinel, strings.Join(e.target.Endpoints, ","), what, key, err)
}

// fetch reads a key the cache does not hold, caches it and watches it.
// nil, nil: no such key.
func (e *etcdService) fetch(ctx context.Context, key string) ([]byte, error) {
	var resp *clientv3.GetResponse
	err := e.request(ctx, "get "+key, etcdTransient, func(ctx context.Context) error {
		var err error
		resp, err = e.cli.Get(ctx, key)
		return err
	})
	if err != nil {
		return nil, e.wrapEtcd("get", key, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, nil
	}
	kv := resp.Kvs[0]
	e.mu.Lock()
	defer e.mu.Unlock()
	en, ok := e.cache[key]
	switch {
	case !ok:
		en = e.storeLocked(key, kv.Value, kv.ModRevision)
		if !e.closed { // Close waits for the watches it knows of
			e.wg.Add(1)
			go e.watchKey(key, resp.Header.Revision)
		}
	case en.rev < kv.ModRevision: // its watch would bring it too
		e.storeLocked(key, kv.Value, kv.ModRevision)
	}
	if en.err != nil {
		return nil, en.err
	}
	return append([]byte(nil), en.value...), nil
}

// watchKey keeps a cached key current from revision rev+1 until it is
// deleted (reported gone) or Close. When the watch ends otherwise
// (compaction, cancellation) the key is read again and watched from there.
func (e *etcdService) watchKey(key string, rev int64) {
	defer e.wg.Done()
	bo := newBackoff(e.renew)
	for e.ctx.Err() == nil {
		// WithRequireLeader: a watch on a member cut off from the others'
		// leader ends (ErrNoLeader) rather than going quiet, so the key is
		// read again, through a member that has one.
		for resp := range e.cli.Watch(clientv3.WithRequireLeader(e.ctx), key, clientv3.WithRev(rev+1)) {
			if err := resp.Err(); err != nil || resp.Canceled {
				if err == nil {
					err = errors.New("watch canceled")
				}
				if e.ctx.Err() == nil {
					e.log.Debug("watch ended; reading the key again", zap.String("key", key), zap.Error(err))
				}
				break
			}
			if e.apply(key, resp.Events) {
				return
			}
			rev = max(rev, resp.Header.Revision)
		}
		for e.ctx.Err() == nil { // read it again, then watch from there
			var resp *clientv3.GetResponse
			err := e.request(e.ctx, "get "+key, etcdTransient, func(ctx context.Context) error {
				var err error
				resp, err = e.cli.Get(ctx, key)
				return err
			})
			if err == nil {
				if len(resp.Kvs) == 0 {
					e.mu.Lock()
					e.dropLocked(key)
					e.mu.Unlock()
					return
				}
				e.apply(key, []*clientv3.Event{{Type: clientv3.EventTypePut, Kv: resp.Kvs[0]}})
				rev = resp.Header.Revision
				break
			}
			if !sleep(e.ctx, bo.delay()) {
				return
			}
		}
	}
}

// apply updates the cache from a key's events; true when it was deleted.
func (e *etcdService) apply(key string, events []*clientv3.Event) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, ev := range events {
		switch ev.Type {
		case clientv3.EventTypePut:
			if old, ok := e.cache[key]; ok && old.rev >= ev.Kv.ModRevision {
				continue
			}
			e.storeLocked(key, ev.Kv.Value, ev.Kv.ModRevision)
		case clientv3.EventTypeDelete:
			e.dropLocked(key)
			return true
		}
	}
	return false
}

// Resolve implements Service.
func (e *etcdService) Resolve(ctx context.Context, segment string) ([]byte, error) {
	return e.resolve(ctx, segment, kindDescriptor, e.fetch)
}

// ResolveRPC implements Service.
func (e *etcdService) ResolveRPC(ctx context.Context, segment string) (RPCLocation, error) {
	b, err := e.resolve(ctx, segment, kindRPC, e.fetch)
	if err != nil {
		return RPCLocation{}, err
	}
	return DecodeRPCLocation(b) // checked when cached
}

// Publish implements Service.
func (e *etcdService) Publish(ctx context.Context, segment string, descriptor []byte, rpc RPCLocation) error {
	start := time.Now()
	p, err := e.checkPublish(segment, descriptor, rpc)
	if err != nil {
		return err
	}
	// Recorded under pubMu, with the put: two Publish calls of one segment
	// at once leave the value of the one that puts last, which renewals
	// then keep (they never rewrite values).
	e.pubMu.Lock()
	defer e.pubMu.Unlock()
	if err := e.record(segment, p); err != nil {
		return err
	}
	if err := e.putAll(ctx, []kvPair{{e.keys.Segment(segment), p.descriptor}, {e.keys.RPC(segment), p.rpc}}); err != nil {
		e.setDirty(true)
		e.wake()
		return err
	}
	e.stats.publishes.Add(1)
	e.publishLat.observe(time.Since(start))
	return nil
}

// setDirty records whether some published keys may not be stored.
func (e *etcdService) setDirty(d bool) {
	e.mu.Lock()
	e.dirty = d
	e.mu.Unlock()
}

// putAll puts keys (nil: every published key) under the lease, granting
// one when there is none. When etcd no longer knows the lease, a new one
// is granted and every published key is put under it. Called with pubMu
// held.
func (e *etcdService) putAll(ctx context.Context, kvs []kvPair) error {
	if kvs == nil {
		kvs = e.publishedKVs()
	}
	lease, err := e.lease(ctx)
	if err != nil {
		return err
	}
	err = e.put(ctx, lease, kvs)
	if !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return err
	}
	return e.republish(ctx)
}

// lease returns the current lease, granting one if there is none. Called
// with pubMu held.
func (e *etcdService) lease(ctx context.Context) (clientv3.LeaseID, error) {
	e.mu.Lock()
	id, closed := clientv3.LeaseID(e.leaseID), e.closed
	e.mu.Unlock()
	switch {
	case closed: // Close revoked it, or is about to: no new one
		return 0, e.errClosed()
	case id != 0:
		return id, nil
	}
	ttl := int64((e.TTL + time.Second - 1) / time.Second)
	var resp *clientv3.LeaseGrantResponse
	err := e.request(ctx, "grant lease", etcdTransient, func(ctx context.Context) error {
		var err error
		resp, err = e.cli.Grant(ctx, ttl)
		return err
	})
	if err != nil {
		return 0, e.wrapEtcd("grant lease for", e.keys.Prefix(), err)
	}
	e.mu.Lock()
	e.leaseID, e.ttl = int64(resp.ID), time.Duration(resp.TTL)*time.Second
	e.mu.Unlock()
	e.log.Debug("lease granted", zap.Int64("lease", int64(resp.ID)), zap.Int64("ttl", resp.TTL))
	return resp.ID, nil
}

// put writes keys under lease, in transactions of up to 64 keys (etcd
// bounds a transaction to 128 operations by default). A lease etcd does
// not know is returned as rpctypes.ErrLeaseNotFound, unwrapped.
func (e *etcdService) put(ctx context.Context, lease clientv3.LeaseID, kvs []kvPair) error {
	for len(kvs) > 0 {
		n := min(len(kvs), 64)
		ops := make([]clientv3.Op, n)
		for i, kv := range kvs[:n] {
			ops[i] = clientv3.OpPut(kv.key, string(kv.value), clientv3.WithLease(lease))
		}
		err := e.request(ctx, "put "+kvs[0].key, etcdTransient, func(ctx context.Context) error {
			_, err := e.cli.Txn(ctx).Then(ops...).Commit()
			return err
		})
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return err
		}
		if err != nil {
			return e.wrapEtcd("put", kvs[0].key, err)
		}
		kvs = kvs[n:]
	}
	return nil
}

// republish grants a new lease and puts every published key under it.
// Called with pubMu held.
func (e *etcdService) republish(ctx context.Context) error {
	e.mu.Lock()
	old := e.leaseID
	e.leaseID = 0
	e.mu.Unlock()
	lease, err := e.lease(ctx)
	if err != nil {
		return err
	}
	if err := e.put(ctx, lease, e.publishedKVs()); err != nil {
		if errors.Is(err, rpctypes.ErrLeaseNotFound) { // lost again at once
			e.mu.Lock()
			e.leaseID = 0
			e.mu.Unlock()
			err = e.wrapEtcd("put under a new lease", e.keys.Prefix(), err)
		}
		return err
	}
	if old != 0 {
		e.stats.republishes.Add(1)
		e.log.Info("published again under a new lease: etcd no longer knew the old one",
			zap.Int64("old_lease", old), zap.Int64("lease", int64(lease)))
	}
	return nil
}

// wake makes the supervisor retry now.
func (e *etcdService) wake() {
	select {
	case e.kick <- struct{}{}:
	default:
	}
}

// supervise renews the lease every TTL/3 (KeepAliveOnce; a lease etcd
// lost is replaced and the keys put again), or probes etcd when nothing is
// published, and retries with backoff while etcd is unreachable.
func (e *etcdService) supervise() {
	defer e.wg.Done()
	bo := newBackoff(e.renew)
	wait := e.renew
	for {
		t := time.NewTimer(wait)
		select {
		case <-e.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		case <-e.kick:
			t.Stop()
		}
		if err := e.tick(); err != nil {
			wait = bo.delay()
			continue
		}
		bo.reset()
		e.mu.Lock()
		wait = max(e.ttl/3, 100*time.Millisecond)
		e.mu.Unlock()
	}
}

// tick is one round of the supervisor.
func (e *etcdService) tick() error {
	e.pubMu.Lock()
	defer e.pubMu.Unlock()
	e.mu.Lock()
	lease, n, dirty := clientv3.LeaseID(e.leaseID), len(e.published), e.dirty
	e.mu.Unlock()
	switch {
	case n == 0:
		return e.request(e.ctx, "probe "+e.keys.Prefix(), etcdTransient, func(ctx context.Context) error {
			_, err := e.cli.Get(ctx, e.keys.Prefix(), clientv3.WithPrefix(), clientv3.WithCountOnly())
			return err
		})
	case lease == 0:
		if err := e.putAll(keeping(e.ctx), nil); err != nil {
			return err
		}
		e.setDirty(false)
		return nil
	}
	// The lease is renewed first, also while a put fails (a descriptor
	// etcd refuses as too large, a full database): the keys it stored
	// stay alive meanwhile instead of expiring with the lease.
	var resp *clientv3.LeaseKeepAliveResponse
	err := e.request(keeping(e.ctx), "renew lease", func(err error) bool {
		return etcdTransient(err) && !errors.Is(err, rpctypes.ErrLeaseNotFound)
	}, func(ctx context.Context) error {
		var err error
		resp, err = e.cli.KeepAliveOnce(ctx, lease)
		return err
	})
	if err == nil && resp.TTL <= 0 {
		err = rpctypes.ErrLeaseNotFound
	}
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		if err := e.republish(keeping(e.ctx)); err != nil {
			return err
		}
		e.setDirty(false)
		return nil
	}
	if err != nil {
		return err
	}
	e.stats.renewals.Add(1)
	if dirty {
		if err := e.putAll(keeping(e.ctx), nil); err != nil {
			return err
		}
		e.setDirty(false)
	}
	return nil
}

// Status implements Service.
func (e *etcdService) Status() Status { return e.status() }

// Close implements Service.
func (e *etcdService) Close(ctx context.Context) error {
	e.closeOnce.Do(func() {
		e.mu.Lock()
		e.closed = true
		e.mu.Unlock()
		e.cancel()
		e.wg.Wait()
		e.pubMu.Lock() // a Publish in flight finishes first; later ones fail
		defer e.pubMu.Unlock()
		e.mu.Lock()
		lease := clientv3.LeaseID(e.leaseID)
		e.mu.Unlock()
		if lease != 0 {
			err := e.request(closing(ctx), "revoke lease", etcdTransient, func(ctx context.Context) error {
				_, err := e.cli.Revoke(ctx, lease)
				return err
			})
			if err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
				e.closeErr = fmt.Errorf("metadata: %w: etcd %s: revoking lease %x: %v; this node's keys expire within %s",
					errdefs.ErrPeerUnreachable, strings.Join(e.target.Endpoints, ","), int64(lease), err, e.ttl)
			}
		}
		if err := e.cli.Close(); err != nil && e.closeErr == nil && !errors.Is(err, context.Canceled) {
			e.closeErr = fmt.Errorf("metadata: closing the etcd client: %w", err)
		}
	})
	return e.closeErr
}
