package metadata

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"go.uber.org/zap"
)

// kvBackend is a key-value store whose keys expire unless written again:
// Redis (SET ... PX), or an HTTP metadata server (kvconnect's expires
// entries; Mooncake's keep them until deleted). Methods are called from
// several goroutines at once; errors are returned as the client gave them
// and classified by transient.
type kvBackend interface {
	// get returns a key's value, or nil when there is none.
	get(ctx context.Context, key string) ([]byte, error)
	// getMany returns the values of the keys that exist.
	getMany(ctx context.Context, keys []string) (map[string][]byte, error)
	// put writes keys that expire after ttl unless written again.
	put(ctx context.Context, kvs []kvPair, ttl time.Duration) error
	// del deletes keys (missing keys are not an error).
	del(ctx context.Context, keys []string) error
	// transient says whether err means the service could not be reached.
	transient(err error) bool
	// wrap turns an error into this package's, naming the operation and key.
	wrap(what, key string, err error) error
	close() error
}

// ttlService is the Redis and HTTP backend: this node's keys are written
// with an expiry of TTL and written again every TTL/3; resolved keys are
// cached and re-read every RefreshInterval, which is when Gone notices
// that one disappeared.
type ttlService struct {
	*core
	kv     kvBackend
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	pubMu  sync.Mutex
	kick   chan struct{}
}

var _ Service = (*ttlService)(nil)

func newTTLService(s *settings, kv kvBackend) *ttlService {
	ctx, cancel := background()
	t := &ttlService{core: newCore(s), kv: kv, ctx: ctx, cancel: cancel, kick: make(chan struct{}, 1)}
	t.wg.Add(1)
	go t.run()
	return t
}

// Publish implements Service.
func (t *ttlService) Publish(ctx context.Context, segment string, descriptor []byte, rpc RPCLocation) error {
	start := time.Now()
	p, err := t.checkPublish(segment, descriptor, rpc)
	if err != nil {
		return err
	}
	if err := t.record(segment, p); err != nil {
		return err
	}
	t.pubMu.Lock()
	defer t.pubMu.Unlock()
	t.mu.Lock()
	closed := t.closed
	t.mu.Unlock()
	if closed { // Close deleted the keys, or is about to
		return t.errClosed()
	}
	key := t.keys.Segment(segment)
	err = t.request(ctx, "put "+key, t.kv.transient, func(ctx context.Context) error {
		return t.kv.put(ctx, []kvPair{{key, p.descriptor}, {t.keys.RPC(segment), p.rpc}}, t.TTL)
	})
	if err != nil {
		t.wake()
		return t.kv.wrap("put", key, err)
	}
	t.stats.publishes.Add(1)
	t.publishLat.observe(time.Since(start))
	return nil
}

func (t *ttlService) wake() {
	select {
	case t.kick <- struct{}{}:
	default:
	}
}

// fetch reads a key the cache does not hold and caches it.
func (t *ttlService) fetch(ctx context.Context, key string) ([]byte, error) {
	var v []byte
	err := t.request(ctx, "get "+key, t.kv.transient, func(ctx context.Context) error {
		var err error
		v, err = t.kv.get(ctx, key)
		return err
	})
	if err != nil {
		return nil, t.kv.wrap("get", key, err)
	}
	if v == nil {
		return nil, nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.storeLocked(key, v, 0)
	if e.err != nil {
		return nil, e.err
	}
	return append([]byte(nil), v...), nil
}

// Resolve implements Service.
func (t *ttlService) Resolve(ctx context.Context, segment string) ([]byte, error) {
	return t.resolve(ctx, segment, kindDescriptor, t.fetch)
}

// ResolveRPC implements Service.
func (t *ttlService) ResolveRPC(ctx context.Context, segment string) (RPCLocation, error) {
	b, err := t.resolve(ctx, segment, kindRPC, t.fetch)
	if err != nil {
		return RPCLocation{}, err
	}
	return DecodeRPCLocation(b)
}

// run writes this node's keys again every TTL/3 and re-reads the cache
// every RefreshInterval; after a failure it retries with backoff.
func (t *ttlService) run() {
	defer t.wg.Done()
	bo := newBackoff(min(t.renew, t.RefreshInterval))
	nextRenew, nextRefresh := time.Now().Add(t.renew), time.Now().Add(t.RefreshInterval)
	failed := false
	for {
		next := nextRenew
		if nextRefresh.Before(next) {
			next = nextRefresh
		}
		wait := time.Until(next)
		if failed {
			wait = bo.delay()
		}
		timer := time.NewTimer(max(wait, 0))
		select {
		case <-t.ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		case <-t.kick:
			timer.Stop()
			nextRenew = time.Now()
		}
		now := time.Now()
		var err error
		if failed || !now.Before(nextRenew) {
			if err = t.renewAll(failed); err == nil {
				nextRenew = now.Add(t.renew)
			}
		}
		if err == nil && (failed || !now.Before(nextRefresh)) {
			if err = t.refresh(); err == nil {
				nextRefresh = now.Add(t.RefreshInterval)
			}
		}
		failed = err != nil
		if !failed {
			bo.reset()
		}
	}
}

// renewAll writes every published key again with a fresh expiry.
func (t *ttlService) renewAll(afterFailure bool) error {
	t.pubMu.Lock()
	defer t.pubMu.Unlock()
	kvs := t.publishedKVs()
	t.mu.Lock()
	wasLost := !t.connected
	t.mu.Unlock()
	if len(kvs) == 0 {
		// Nothing to renew: probe after a failure, or while a failed
		// Resolve has the service marked lost (nothing else would find
		// it back).
		if !afterFailure && !wasLost {
			return nil
		}
		return t.request(t.ctx, "probe", t.kv.transient, func(ctx context.Context) error {
			_, err := t.kv.get(ctx, t.keys.Prefix()+"kvconnect-probe")
			return err
		})
	}
	err := t.request(keeping(t.ctx), "renew "+kvs[0].key, t.kv.transient, func(ctx context.Context) error {
		return t.kv.put(ctx, kvs, t.TTL)
	})
	if err != nil {
		return err
	}
	t.stats.renewals.Add(1)
	if wasLost {
		t.stats.republishes.Add(1)
		t.log.Info("published again", zap.Int("keys", len(kvs)))
	}
	return nil
}

// refresh re-reads every cached key: changed values are updated, keys
// that vanished are reported gone.
func (t *ttlService) refresh() error {
	t.mu.Lock()
	keys := make([]string, 0, len(t.cache))
	for k := range t.cache {
		keys = append(keys, k)
	}
	t.mu.Unlock()
	if len(keys) == 0 {
		return nil
	}
	sort.Strings(keys)
	var got map[string][]byte
	err := t.request(t.ctx, "refresh cache", t.kv.transient, func(ctx context.Context) error {
		var err error
		got, err = t.kv.getMany(ctx, keys)
		return err
	})
	if err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, k := range keys {
		v, ok := got[k]
		e, cached := t.cache[k]
		switch {
		case !cached:
		case !ok:
			t.dropLocked(k)
		case string(e.value) != string(v):
			t.storeLocked(k, v, 0)
		}
	}
	return nil
}

// Status implements Service.
func (t *ttlService) Status() Status { return t.status() }

// Close implements Service.
func (t *ttlService) Close(ctx context.Context) error {
	t.closeOnce.Do(func() {
		t.mu.Lock()
		t.closed = true
		t.mu.Unlock()
		t.cancel()
		t.wg.Wait()
		t.pubMu.Lock() // a Publish in flight finishes first; later ones fail
		defer t.pubMu.Unlock()
		var keys []string
		for _, kv := range t.publishedKVs() {
			keys = append(keys, kv.key)
		}
		var errs []error
		if len(keys) > 0 {
			err := t.request(closing(ctx), "delete", t.kv.transient, func(ctx context.Context) error { return t.kv.del(ctx, keys) })
			if err != nil {
				errs = append(errs, fmt.Errorf("%w; this node's keys expire within %s", t.kv.wrap("delete", keys[0], err), t.TTL))
			}
		}
		if err := t.kv.close(); err != nil {
			errs = append(errs, fmt.Errorf("metadata: closing the client of %s: %w", t.target, err))
		}
		t.closeErr = errors.Join(errs...)
	})
	return t.closeErr
}
