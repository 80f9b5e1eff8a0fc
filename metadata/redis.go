package metadata

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kvconnect/kvconnect/errdefs"
)

// redisKV is the Redis backend: SET key value PX ttl in a MULTI/EXEC per
// write, MGET to refresh the cache, DEL at Close. Keys are Mooncake's
// (Mooncake's own Redis plugin uses plain GET/SET/DEL on the same keys).
type redisKV struct {
	c    *redis.Client
	addr string
}

func openRedis(ctx context.Context, s *settings) (Service, error) {
	addr := s.target.Endpoints[0]
	opt := &redis.Options{
		Addr: addr, Username: s.Username, Password: string(s.Password), DB: s.RedisDB,
		DialTimeout: s.ConnectTimeout, ReadTimeout: s.ConnectTimeout, WriteTimeout: s.ConnectTimeout,
		ContextTimeoutEnabled: true,
		DialerRetries:         1,
		MaxRetries:            -1, // this package retries, with backoff
		PoolSize:              8,
		DisableIdentity:       true,
	}
	switch {
	case s.target.TLS:
		cfg, err := s.TLS.Config()
		if err != nil {
			return nil, err
		}
		host, _, _ := net.SplitHostPort(addr)
		cfg.ServerName = host
		opt.TLSConfig = cfg
	case s.TLS.Set():
		return nil, fmt.Errorf("metadata: %w: %s: TLS files are set but the URL is redis://; use rediss:// for TLS",
			errdefs.ErrInvalidArgument, s.target)
	}
	kv := &redisKV{c: redis.NewClient(opt), addr: addr}
	if err := kv.c.Ping(ctx).Err(); err != nil {
		kv.c.Close()
		return nil, kv.openError(s, err)
	}
	return newTTLService(s, kv), nil
}

// openError explains why the first PING failed.
func (r *redisKV) openError(s *settings, err error) error {
	switch {
	case redis.IsAuthError(err):
		what := "no password was given"
		if s.Password != "" {
			what = "wrong user name or password"
		}
		return fmt.Errorf("metadata: %w: redis %s refused the connection: %s (%v)", errdefs.ErrUnauthenticated, r.addr, what, err)
	case redis.IsPermissionError(err):
		return fmt.Errorf("metadata: %w: redis %s: user %q may not run the commands kvconnect needs (GET, SET, MGET, DEL, MULTI): %v",
			errdefs.ErrUnauthenticated, r.addr, s.Username, err)
	}
	var ce *tls.CertificateVerificationError
	if errors.As(err, &ce) {
		return fmt.Errorf("metadata: %w: redis %s: TLS: the server's certificate is not trusted (check the CA file): %v", errdefs.ErrUnauthenticated, r.addr, err)
	}
	var re redis.Error
	if errors.As(err, &re) && !r.transient(err) {
		return fmt.Errorf("metadata: %w: redis %s: %v", errdefs.ErrProtocol, r.addr, err)
	}
	hint := ""
	if isTimeout(err) && s.target.TLS {
		hint = " (a rediss:// URL pointed at a plain port hangs in the TLS handshake)"
	}
	return fmt.Errorf("metadata: %w: redis %s did not answer within %s: %v%s", errdefs.ErrPeerUnreachable, r.addr, s.ConnectTimeout, cleanDialError(err), hint)
}

func (r *redisKV) get(ctx context.Context, key string) ([]byte, error) {
	b, err := r.c.Get(ctx, key).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	return b, err
}

func (r *redisKV) getMany(ctx context.Context, keys []string) (map[string][]byte, error) {
	out := make(map[string][]byte, len(keys))
	for len(keys) > 0 {
		n := min(len(keys), 500)
		vals, err := r.c.MGet(ctx, keys[:n]...).Result()
		if err != nil {
			return nil, err
		}
		for i, v := range vals {
			if s, ok := v.(string); ok {
				out[keys[i]] = []byte(s)
			}
		}
		keys = keys[n:]
	}
	return out, nil
}

func (r *redisKV) put(ctx context.Context, kvs []kvPair, ttl time.Duration) error {
	cmds, err := r.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for _, kv := range kvs {
			p.Set(ctx, kv.key, kv.value, ttl)
		}
		return nil
	})
	if err != nil {
		// A command the server refused (READONLY, OOM, NOREPLICAS) makes
		// the transaction fail with EXECABORT, which does not say why:
		// the command's own reply does.
		for _, c := range cmds {
			var re redis.Error
			if cerr := c.Err(); cerr != nil && errors.As(cerr, &re) && cerr.Error() != err.Error() {
				return fmt.Errorf("%w (%v)", cerr, err)
			}
		}
	}
	return err
}

func (r *redisKV) del(ctx context.Context, keys []string) error {
	return r.c.Del(ctx, keys...).Err()
}

// transient: anything but a reply from the server (a LOADING reply too:
// the server is starting).
func (r *redisKV) transient(err error) bool {
	var re redis.Error
	if errors.As(err, &re) {
		return redis.IsLoadingError(err)
	}
	return true
}

func (r *redisKV) wrap(what, key string, err error) error {
	sentinel := errdefs.ErrPeerUnreachable
	switch {
	case redis.IsAuthError(err), redis.IsPermissionError(err):
		sentinel = errdefs.ErrUnauthenticated
	case errors.Is(err, context.Canceled):
		sentinel = errdefs.ErrCanceled
	case !r.transient(err):
		sentinel = errdefs.ErrProtocol // the server answered with an error, e.g. WRONGTYPE
	}
	return fmt.Errorf("metadata: %w: redis %s: %s %s: %v", sentinel, r.addr, what, key, err)
}

func (r *redisKV) close() error { return r.c.Close() }
