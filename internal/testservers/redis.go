package testservers

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisOptions configures StartRedis.
type RedisOptions struct {
	// Password sets requirepass.
	Password string
	// TLS serves TLS only (no plain port) with PKI's server certificate;
	// client certificates are optional.
	TLS *PKI
}

// Redis is a running redis-server without persistence. Stop, Kill, Start
// and Restart keep the port (the data is lost: nothing is saved).
type Redis struct {
	t        testing.TB
	bin      string
	Addr     string // 127.0.0.1:port
	password string
	tls      *PKI
	args     []string
	proc     *proc
	log      *tailBuffer
	admin    *redis.Client
}

// quietRedis silences go-redis's process-wide logger, which prints every
// refused dial while a server starts (test processes only).
var quietRedis sync.Once

type nopLogger struct{}

func (nopLogger) Printf(context.Context, string, ...any) {}

// StartRedis starts redis-server (Debian's redis-server) on a free
// loopback port with no persistence and a temporary directory, and returns
// once it answers PING. It is stopped when the test ends.
func StartRedis(t testing.TB, o RedisOptions) *Redis {
	t.Helper()
	bin := lookBinary(t, "redis-server", "redis-server")
	quietRedis.Do(func() { redis.SetLogger(nopLogger{}) })
	dir := t.TempDir()
	r := &Redis{t: t, bin: bin, password: o.Password, tls: o.TLS, log: &tailBuffer{max: 64 << 10}}
	t.Cleanup(func() {
		if r.proc != nil {
			r.proc.stop(syscall.SIGKILL)
		}
	})
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		ports, perr := freePorts(1)
		if perr != nil {
			t.Fatal(perr)
		}
		r.Addr = fmt.Sprintf("127.0.0.1:%d", ports[0])
		port := strconv.Itoa(ports[0])
		r.args = []string{"--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir, "--loglevel", "warning"}
		if o.TLS != nil {
			r.args = append(r.args, "--port", "0", "--tls-port", port, "--tls-cert-file", o.TLS.ServerCert,
				"--tls-key-file", o.TLS.ServerKey, "--tls-ca-cert-file", o.TLS.CAFile, "--tls-auth-clients", "optional")
		} else {
			r.args = append(r.args, "--port", port)
		}
		if o.Password != "" {
			r.args = append(r.args, "--requirepass", o.Password)
		}
		if err = r.start(); err != errPortTaken {
			break
		}
	}
	if err != nil {
		t.Fatalf("starting redis-server: %v\n%s", err, r.log)
	}
	return r
}

func (r *Redis) start() error {
	p, err := startProc(r.bin, r.args, r.log)
	if err != nil {
		return err
	}
	r.proc = p
	c, err := r.client()
	if err != nil {
		return err
	}
	defer c.Close()
	err = waitReady(p, 20*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		return c.Ping(ctx).Err()
	})
	if err != nil {
		p.stop(syscall.SIGKILL)
		if portTaken(r.log.String()) {
			return errPortTaken
		}
		return err
	}
	return nil
}

func (r *Redis) client() (*redis.Client, error) {
	opt := &redis.Options{Addr: r.Addr, Password: r.password, DialerRetries: 1, MaxRetries: 1, DisableIdentity: true}
	if r.tls != nil {
		cfg, err := tlsClientConfig(r.tls)
		if err != nil {
			return nil, err
		}
		opt.TLSConfig = cfg
	}
	return redis.NewClient(opt), nil
}

// Client returns a client authenticated with the server's password,
// closed when the test ends.
func (r *Redis) Client(t testing.TB) *redis.Client {
	t.Helper()
	c, err := r.client()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// URL is the metadata connection string, redis://127.0.0.1:port (or
// rediss:// with TLS), without the password.
func (r *Redis) URL() string {
	if r.tls != nil {
		return "rediss://" + r.Addr
	}
	return "redis://" + r.Addr
}

// Log returns the end of the server's log.
func (r *Redis) Log() string { return r.log.String() }

// Stop stops the server with SIGTERM and waits for it to exit.
func (r *Redis) Stop() { r.proc.stop(syscall.SIGTERM) }

// Kill stops the server with SIGKILL and waits for it to exit.
func (r *Redis) Kill() { r.proc.stop(syscall.SIGKILL) }

// Start starts a stopped server again on the same port.
func (r *Redis) Start() {
	r.t.Helper()
	if !r.proc.exited() {
		r.t.Fatal("redis-server is still running")
	}
	if err := r.start(); err != nil {
		r.t.Fatalf("restarting redis-server: %v\n%s", err, r.log)
	}
}

// Restart is Stop then Start.
func (r *Redis) Restart() {
	r.t.Helper()
	r.Stop()
	r.Start()
}

// Commands returns how many commands the server has processed (INFO
// stats total_commands_processed), counting the INFO itself (sent on one
// connection kept for these calls).
func (r *Redis) Commands(t testing.TB) int64 {
	t.Helper()
	if r.admin == nil {
		r.admin = r.Client(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := r.admin.InfoMap(ctx, "stats").Result()
	if err != nil {
		t.Fatalf("redis INFO stats: %v", err)
	}
	n, err := strconv.ParseInt(info["Stats"]["total_commands_processed"], 10, 64)
	if err != nil {
		t.Fatalf("redis INFO stats: total_commands_processed %q: %v", info["Stats"]["total_commands_processed"], err)
	}
	return n
}
