package testservers

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// EtcdOptions configures StartEtcd.
type EtcdOptions struct {
	// TLS serves clients over TLS with PKI's server certificate and
	// requires client certificates signed by its CA.
	TLS *PKI
	// Args are extra etcd flags.
	Args []string
}

// Etcd is a running single-member etcd. Stop, Kill, Start and Restart
// keep the data directory and the ports.
type Etcd struct {
	t         testing.TB
	bin       string
	Endpoint  string // 127.0.0.1:port
	ClientURL string // http(s)://127.0.0.1:port
	DataDir   string
	args      []string
	tls       *PKI
	proc      *proc
	log       *tailBuffer
	root      string // root password once EnableAuth ran
}

// StartEtcd starts etcd (Debian's etcd-server) with fast elections
// (--heartbeat-interval=10 --election-timeout=100, so leases may be as
// short as 1 s), a temporary data directory and free loopback ports, and
// returns once /health answers. It is stopped when the test ends.
func StartEtcd(t testing.TB, o EtcdOptions) *Etcd {
	t.Helper()
	bin := lookBinary(t, "etcd", "etcd-server")
	dir := t.TempDir()
	e := &Etcd{t: t, bin: bin, DataDir: filepath.Join(dir, "data"), tls: o.TLS, log: &tailBuffer{max: 64 << 10}}
	t.Cleanup(func() {
		if e.proc != nil {
			e.proc.stop(syscall.SIGKILL)
		}
	})
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		if err = e.configure(o); err != nil {
			break
		}
		if err = e.start(); err != errPortTaken {
			break
		}
	}
	if err != nil {
		t.Fatalf("starting etcd: %v\n%s", err, e.log)
	}
	return e
}

func (e *Etcd) configure(o EtcdOptions) error {
	ports, err := freePorts(2)
	if err != nil {
		return err
	}
	scheme := "http"
	if e.tls != nil {
		scheme = "https"
	}
	e.Endpoint = fmt.Sprintf("127.0.0.1:%d", ports[0])
	e.ClientURL = scheme + "://" + e.Endpoint
	peer := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	e.args = []string{"--name", "t", "--data-dir", e.DataDir,
		"--listen-client-urls", e.ClientURL, "--advertise-client-urls", e.ClientURL,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer, "--initial-cluster", "t=" + peer,
		"--logger=zap", "--log-outputs=stderr", "--log-level=warn",
		"--heartbeat-interval=10", "--election-timeout=100", "--bcrypt-cost=4"}
	if e.tls != nil {
		e.args = append(e.args, "--cert-file", e.tls.ServerCert, "--key-file", e.tls.ServerKey,
			"--trusted-ca-file", e.tls.CAFile, "--client-cert-auth")
	}
	e.args = append(e.args, o.Args...)
	return nil
}

// start runs etcd and waits for /health.
func (e *Etcd) start() error {
	p, err := startProc(e.bin, e.args, e.log)
	if err != nil {
		return err
	}
	e.proc = p
	hc, err := e.httpClient()
	if err != nil {
		return err
	}
	err = waitReady(p, 20*time.Second, func() error {
		resp, err := hc.Get(e.ClientURL + "/health")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if !strings.Contains(string(b), `"health":"true"`) {
			return fmt.Errorf("/health: %s", b)
		}
		return nil
	})
	if err != nil {
		p.stop(syscall.SIGKILL)
		if portTaken(e.log.String()) {
			return errPortTaken
		}
		return err
	}
	return nil
}

func (e *Etcd) httpClient() (*http.Client, error) {
	tr := &http.Transport{DisableKeepAlives: true}
	if e.tls != nil {
		cfg, err := e.TLSConfig()
		if err != nil {
			return nil, err
		}
		tr.TLSClientConfig = cfg
	}
	return &http.Client{Transport: tr, Timeout: 2 * time.Second}, nil
}

// TLSConfig is a client configuration trusting the PKI's CA with its
// client certificate (nil without TLS).
func (e *Etcd) TLSConfig() (*tls.Config, error) {
	if e.tls == nil {
		return nil, nil
	}
	return tlsClientConfig(e.tls)
}

// URL is the metadata connection string: etcd://127.0.0.1:port.
func (e *Etcd) URL() string { return "etcd://" + e.Endpoint }

// Log returns the end of etcd's log.
func (e *Etcd) Log() string { return e.log.String() }

// Stop stops etcd with SIGTERM and waits for it to exit.
func (e *Etcd) Stop() { e.proc.stop(syscall.SIGTERM) }

// Kill stops etcd with SIGKILL and waits for it to exit.
func (e *Etcd) Kill() { e.proc.stop(syscall.SIGKILL) }

// Start starts a stopped etcd again with the same data directory and
// ports and waits until it is ready.
func (e *Etcd) Start() {
	e.t.Helper()
	if !e.proc.exited() {
		e.t.Fatal("etcd is still running")
	}
	if err := e.start(); err != nil {
		e.t.Fatalf("restarting etcd: %v\n%s", err, e.log)
	}
}

// Restart is Stop then Start.
func (e *Etcd) Restart() {
	e.t.Helper()
	e.Stop()
	e.Start()
}

// Client returns an etcd client (as root once EnableAuth ran), closed
// when the test ends.
func (e *Etcd) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	cfg, err := e.TLSConfig()
	if err != nil {
		t.Fatal(err)
	}
	c := clientv3.Config{Endpoints: []string{e.Endpoint}, DialTimeout: 5 * time.Second, TLS: cfg, Logger: zap.NewNop()}
	if e.root != "" && e.tls == nil {
		c.Username, c.Password = "root", e.root
	}
	cli, err := clientv3.New(c)
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// EtcdUser is a user EnableAuth creates, with read/write on Prefix.
type EtcdUser struct {
	Name, Password, Prefix string
}

// EnableAuth creates root (with rootPassword) and users, grants each
// user read/write on its prefix, and enables authentication, through the
// client API (Debian's etcd-server has no etcdctl).
func (e *Etcd) EnableAuth(t testing.TB, rootPassword string, users ...EtcdUser) {
	t.Helper()
	cli := e.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	steps := []func() error{
		func() error { _, err := cli.UserAdd(ctx, "root", rootPassword); return err },
		func() error { _, err := cli.UserGrantRole(ctx, "root", "root"); return err },
	}
	for _, u := range users {
		role := u.Name + "-role"
		steps = append(steps,
			func() error { _, err := cli.UserAdd(ctx, u.Name, u.Password); return err },
			func() error { _, err := cli.RoleAdd(ctx, role); return err },
			func() error {
				_, err := cli.RoleGrantPermission(ctx, role, u.Prefix, clientv3.GetPrefixRangeEnd(u.Prefix),
					clientv3.PermissionType(clientv3.PermReadWrite))
				return err
			},
			func() error { _, err := cli.UserGrantRole(ctx, u.Name, role); return err },
		)
	}
	steps = append(steps, func() error { _, err := cli.AuthEnable(ctx); return err })
	for i, step := range steps {
		if err := step(); err != nil {
			t.Fatalf("enabling etcd auth, step %d: %v", i+1, err)
		}
	}
	e.root = rootPassword
}

// Metric returns the sum of the samples of a Prometheus metric on etcd's
// /metrics whose labels include every label given ("grpc_method",
// "Range", ...).
func (e *Etcd) Metric(t testing.TB, name string, labels ...string) float64 {
	t.Helper()
	hc, err := e.httpClient()
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Get(e.ClientURL + "/metrics")
	if err != nil {
		t.Fatalf("etcd /metrics: %v", err)
	}
	defer resp.Body.Close()
	var want []string
	for i := 0; i+1 < len(labels); i += 2 {
		want = append(want, labels[i]+`="`+labels[i+1]+`"`)
	}
	sum := 0.0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) || (len(line) > len(name) && line[len(name)] != '{' && line[len(name)] != ' ') {
			continue
		}
		ok := true
		for _, w := range want {
			ok = ok && strings.Contains(line, w)
		}
		if !ok {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			t.Fatalf("etcd /metrics: %q: %v", line, err)
		}
		sum += v
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("etcd /metrics: %v", err)
	}
	return sum
}

// RangeRequests counts the Range RPCs etcd served (reads: Get).
func (e *Etcd) RangeRequests(t testing.TB) float64 {
	return e.Metric(t, "grpc_server_started_total", "grpc_method", "Range")
}
