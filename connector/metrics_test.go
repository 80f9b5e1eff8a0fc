package connector_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap/zaptest"

	"github.com/kvconnect/kvconnect/connector"
	"github.com/kvconnect/kvconnect/internal/testbin"
	"github.com/kvconnect/kvconnect/internal/testservers"
	"github.com/kvconnect/kvconnect/metrics/metricstest"
	"github.com/kvconnect/kvconnect/plugins/transporttest"
)

// metricsNode starts a node (tcp as a plugin unless opts say otherwise)
// with its metrics endpoint on a free loopback port.
func metricsNode(t *testing.T, cfg connector.Config, opts ...connector.Option) *connector.Connector {
	t.Helper()
	if cfg.Protocol == "" {
		cfg.Protocol = "tcp"
	}
	if cfg.PluginDir == "" {
		cfg.PluginDir = pluginDir(t)
	}
	cfg.MetricsAddress = "127.0.0.1:0"
	opts = append([]connector.Option{connector.WithLogger(zaptest.NewLogger(t))}, opts...)
	c, err := connector.New(context.Background(), cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if c.Status().MetricsAddress == "" {
		t.Fatal("Status has no metrics_address although metrics_address is set")
	}
	return c
}

func endpointURL(c *connector.Connector, path string) string {
	return "http://" + c.Status().MetricsAddress + path
}

// scrape GETs the node's /metrics and parses it with the Prometheus text
// parser.
func scrape(t *testing.T, c *connector.Connector) metricstest.Families {
	t.Helper()
	f, err := metricstest.Scrape(context.Background(), endpointURL(c, "/metrics"))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// get answers an endpoint page: status code and body.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// want checks one series' value.
func want(t *testing.T, f metricstest.Families, v float64, name string, labels ...string) {
	t.Helper()
	got, found := f.Get(name, labels...)
	if !found || got != v {
		t.Errorf("%s%v = %v (found %v), want %v\n%s", name, labels, got, found, v, f.Dump(name))
	}
}

// wantNone checks that no series of name with labels counts anything.
func wantNone(t *testing.T, f metricstest.Families, name string, labels ...string) {
	t.Helper()
	if v := f.Value(name, labels...); v != 0 {
		t.Errorf("%s%v = %v, want none\n%s", name, labels, v, f.Dump(name))
	}
}

// TestMetricsBytesMatchOnBothNodes moves exactly N bytes each way between
// two nodes and scrapes both: the initiator's initiated bytes and the
// target's served bytes (counted inside its transport, in the plugin
// process when it is one) are N, op by op; each side shows nothing of the
// other direction; the batch histogram, ops in flight, peers, regions and
// transports say what happened.
func TestMetricsBytesMatchOnBothNodes(t *testing.T) {
	for _, tc := range []struct {
		name       string
		opts       []connector.Option
		mode       string
		peerLabels bool
	}{
		{"plugin", nil, "plugin", false},
		{"in-process", []connector.Option{connector.WithInProcess("tcp")}, "in-process", false},
		{"peer labels", nil, "plugin", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			cfg := connector.Config{MetricsPeerLabels: tc.peerLabels}
			a, b := metricsNode(t, cfg, tc.opts...), metricsNode(t, cfg, tc.opts...)
			const size = 3<<20 + 12345 // several 1 MiB chunks on the wire
			src, dst := alloc(t, a, size), alloc(t, b, size)
			transporttest.Fill(src.Bytes(), 31)
			peer, err := a.Open(ctx, b.SessionID())
			if err != nil {
				t.Fatal(err)
			}
			writes := []connector.Op{
				{Kind: connector.OpWrite, LocalRegion: src.ID(), RemoteRegion: dst.ID(), Length: 2<<20 + 1},
				{Kind: connector.OpWrite, LocalRegion: src.ID(), LocalOffset: 2<<20 + 1, RemoteRegion: dst.ID(), RemoteOffset: 2<<20 + 1, Length: size - (2<<20 + 1)},
			}
			if err := a.Transfer(ctx, peer, writes...); err != nil {
				t.Fatal(err)
			}
			const readN = 777777
			if err := a.Transfer(ctx, peer, connector.Op{Kind: connector.OpRead, LocalRegion: src.ID(), RemoteRegion: dst.ID(), RemoteOffset: 5, Length: readN}); err != nil {
				t.Fatal(err)
			}
			fa, fb := scrape(t, a), scrape(t, b)
			labels := func(kv ...string) []string {
				if tc.peerLabels {
					return append(kv, "peer", b.SessionID())
				}
				return kv
			}
			want(t, fa, size, "kvconnect_initiated_bytes_total", labels("transport", "tcp", "op", "write", "result", "completed")...)
			want(t, fa, 2, "kvconnect_initiated_ops_total", labels("transport", "tcp", "op", "write", "result", "completed")...)
			want(t, fa, readN, "kvconnect_initiated_bytes_total", labels("transport", "tcp", "op", "read", "result", "completed")...)
			want(t, fa, 0, "kvconnect_initiated_bytes_total", labels("transport", "tcp", "result", "failed")...)
			want(t, fb, size, "kvconnect_served_bytes_total", "transport", "tcp", "op", "write", "result", "completed")
			want(t, fb, readN, "kvconnect_served_bytes_total", "transport", "tcp", "op", "read", "result", "completed")
			if ops := fb.Value("kvconnect_served_ops_total", "transport", "tcp", "op", "write", "result", "completed"); ops < 4 {
				t.Errorf("served WRITE requests %v: want at least 4 (3 MiB in 1 MiB chunks)", ops)
			}
			// Each node saw only its own direction.
			want(t, fa, 0, "kvconnect_served_bytes_total", "transport", "tcp")
			wantNone(t, fb, "kvconnect_initiated_bytes_total")
			want(t, fa, 2, "kvconnect_batch_duration_seconds", labels("transport", "tcp")...)
			want(t, fa, 0, "kvconnect_ops_in_flight", "transport", "tcp")
			want(t, fa, 1, "kvconnect_peers_connected", "transport", "tcp", "kind", "kvconnect")
			want(t, fb, 0, "kvconnect_peers_connected", "transport", "tcp")
			want(t, fa, 1, "kvconnect_handshakes_total", "result", "ok")
			want(t, fb, 1, "kvconnect_regions")
			want(t, fb, size, "kvconnect_registered_bytes")
			want(t, fa, 1, "kvconnect_transport_up", "transport", "tcp", "mode", tc.mode, "preferred", "true")
			want(t, fa, 1, "kvconnect_transport_init_attempts_total", "transport", "tcp", "result", "ok")
			if tc.mode == "plugin" {
				want(t, fa, 1, "kvconnect_plugin_up", "transport", "tcp")
				want(t, fa, 1, "kvconnect_plugin_starts_total", "transport", "tcp")
				want(t, fa, 0, "kvconnect_plugin_restarts_total", "transport", "tcp")
			} else if _, found := fa.Get("kvconnect_plugin_up"); found {
				t.Errorf("kvconnect_plugin_up for an in-process transport:\n%s", fa.Dump("kvconnect_plugin"))
			}
			wantRingMetrics(t, a, fa, 2)
			if _, found := fa.Get("go_goroutines"); !found {
				t.Error("the endpoint has no Go runtime metrics")
			}
			if !tc.peerLabels {
				for _, name := range fa.Names() {
					for _, m := range fa[name].Metric {
						for _, l := range m.Label {
							if l.GetName() == "peer" {
								t.Errorf("%s has a peer label without metrics_peer_labels", name)
							}
						}
					}
				}
			}
		})
	}
}

// wantRingMetrics checks the ring series of a node that ran batches
// batches over tcp: all of them through its plugin's ring, and the
// host's waits and way shown, when Status says batches take the ring; no
// ring series otherwise (in-process, or rings off).
func wantRingMetrics(t *testing.T, c *connector.Connector, f metricstest.Families, batches float64) {
	t.Helper()
	onRing := false
	for _, ts := range c.Status().Transports {
		if ts.Name == "tcp" && ts.DataPath == "ring" {
			onRing = true
		}
	}
	if !onRing {
		wantNone(t, f, "kvconnect_ring_batches_total")
		wantNone(t, f, "kvconnect_ring_host_spinning")
		wantNone(t, f, "kvconnect_ring_plugin_claims_total")
		return
	}
	want(t, f, batches, "kvconnect_ring_batches_total", "transport", "tcp")
	// How many waits spun or slept depends on the scheduler (a completion
	// already there when the host looks is neither): the series show.
	for _, s := range [][]string{
		{"kvconnect_ring_host_waits_total", "transport", "tcp", "outcome", "caught_spinning"},
		{"kvconnect_ring_host_waits_total", "transport", "tcp", "outcome", "slept"},
		{"kvconnect_ring_host_spinning", "transport", "tcp"},
	} {
		if _, found := f.Get(s[0], s[1:]...); !found {
			t.Errorf("no %s%v for a plugin with a ring:\n%s", s[0], s[1:], f.Dump("kvconnect_ring"))
		}
	}
	// The plugin took each batch once, whoever took it (which one
	// depends on the scheduler too).
	claims := 0.0
	for _, by := range []string{"spinner", "sleeper", "standby"} {
		v, found := f.Get("kvconnect_ring_plugin_claims_total", "transport", "tcp", "by", by)
		if !found {
			t.Errorf("no kvconnect_ring_plugin_claims_total by %s:\n%s", by, f.Dump("kvconnect_ring"))
		}
		claims += v
	}
	if claims != batches {
		t.Errorf("the plugin's claims add up to %v, want the %v batches the host sent:\n%s", claims, batches, f.Dump("kvconnect_ring"))
	}
}

// TestMetricsFallbackRDMAToTCP: on this host rdma fails to initialise and
// the chain falls back to tcp; the fallback counter says from rdma to tcp
// and at which step, beside the attempts.
func TestMetricsFallbackRDMAToTCP(t *testing.T) {
	c := metricsNode(t, connector.Config{Protocol: "rdma"})
	st := c.Status()
	if st.Transport != "tcp" || !st.Fallback {
		t.Fatalf("status %+v: want tcp after rdma failed", st)
	}
	f := scrape(t, c)
	want(t, f, 1, "kvconnect_fallbacks_total", "from", "rdma", "to", "tcp")
	step := strings.ReplaceAll(st.Attempts[0].Diagnosis.Step, " ", "_")
	want(t, f, 1, "kvconnect_fallbacks_total", "from", "rdma", "to", "tcp", "step", step)
	want(t, f, 1, "kvconnect_transport_init_attempts_total", "transport", "rdma", "result", "failed")
	want(t, f, 1, "kvconnect_transport_init_attempts_total", "transport", "tcp", "result", "ok")
	want(t, f, 1, "kvconnect_transport_up", "transport", "tcp", "preferred", "true")
	if _, found := f.Get("kvconnect_strict_refusals_total", "transport", "rdma"); found {
		t.Errorf("a strict-mode refusal on a node that fell back:\n%s", f.Dump("kvconnect_strict"))
	}
}

// gatedPluginDir is a plugin directory whose tcp plugin runs only while
// its gate is open (testbin.Gated): closing it holds a restart at launch.
func gatedPluginDir(t *testing.T) (dir string, open, closeGate func() error) {
	t.Helper()
	bin, err := testbin.Build("./cmd/kvconnect-transport-tcp", "kvconnect-transport-tcp")
	if err != nil {
		t.Fatal(err)
	}
	dir = t.TempDir()
	_, open, closeGate, err = testbin.Gated(dir, "kvconnect-transport-tcp", bin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { open() })
	return dir, open, closeGate
}

// TestMetricsPluginKilled SIGKILLs the target's plugin: the crash counter
// rises, /healthz answers 503 naming the reason while it is down (its
// restart is held at launch), the served counts do not go back, and once
// the restart goes on /healthz answers 200, the restart counter rises and
// served counts go on from where they were.
func TestMetricsPluginKilled(t *testing.T) {
	ctx := context.Background()
	dir, open, closeGate := gatedPluginDir(t)
	a := metricsNode(t, connector.Config{})
	b := metricsNode(t, connector.Config{PluginDir: dir, PluginStartTimeout: time.Minute})
	src, dst := alloc(t, a, 1<<20), alloc(t, b, 1<<20)
	transporttest.Fill(src.Bytes(), 32)
	peer, err := a.Open(ctx, b.SessionID())
	if err != nil {
		t.Fatal(err)
	}
	write := connector.Op{Kind: connector.OpWrite, LocalRegion: src.ID(), RemoteRegion: dst.ID(), Length: 1 << 20}
	if err := a.Transfer(ctx, peer, write); err != nil {
		t.Fatal(err)
	}
	if code, body := get(t, endpointURL(b, "/healthz")); code != http.StatusOK || strings.TrimSpace(body) != "ok" {
		t.Fatalf("/healthz before the kill: %d %q", code, body)
	}
	f := scrape(t, b) // the plugin reports what it served: 1 MiB
	want(t, f, 1<<20, "kvconnect_served_bytes_total", "op", "write", "result", "completed")

	if err := closeGate(); err != nil {
		t.Fatal(err)
	}
	pid := b.Status().PluginPID
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testbin.Eventually(t, "/healthz to answer 503", func() bool {
		code, _ := get(t, endpointURL(b, "/healthz"))
		return code == http.StatusServiceUnavailable
	})
	// The restart is held at launch: the node stays down until the gate opens.
	code, body := get(t, endpointURL(b, "/healthz"))
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "tcp") || !strings.Contains(body, "plugin process") {
		t.Errorf("/healthz while the plugin is down: %d %q, want 503 naming the transport and why", code, body)
	}
	if code, body := get(t, endpointURL(b, "/readyz")); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz with no transport up: %d %q, want 503", code, body)
	}
	f = scrape(t, b)
	want(t, f, 1, "kvconnect_plugin_crashes_total", "transport", "tcp")
	want(t, f, 0, "kvconnect_plugin_restarts_total", "transport", "tcp")
	want(t, f, 0, "kvconnect_plugin_up", "transport", "tcp")
	want(t, f, 0, "kvconnect_transport_up", "transport", "tcp")
	want(t, f, 1<<20, "kvconnect_served_bytes_total", "op", "write", "result", "completed")

	if err := open(); err != nil {
		t.Fatal(err)
	}
	testbin.Eventually(t, "/healthz to answer 200 after the restart", func() bool {
		code, _ := get(t, endpointURL(b, "/healthz"))
		return code == http.StatusOK
	})
	if b.Status().PluginPID == pid {
		t.Fatal("healthy again with the killed plugin's pid")
	}
	f = scrape(t, b)
	want(t, f, 1, "kvconnect_plugin_crashes_total", "transport", "tcp")
	want(t, f, 1, "kvconnect_plugin_restarts_total", "transport", "tcp")
	want(t, f, 2, "kvconnect_plugin_starts_total", "transport", "tcp")
	want(t, f, 1, "kvconnect_plugin_up", "transport", "tcp")
	want(t, f, 1, "kvconnect_transport_up", "transport", "tcp")
	want(t, f, 1<<20, "kvconnect_served_bytes_total", "op", "write", "result", "completed")

	// The peer reconnects to the restarted plugin; what the new instance
	// serves adds to what the dead one did.
	testbin.Eventually(t, "a write through the restarted plugin", func() bool { return a.Transfer(ctx, peer, write) == nil })
	want(t, scrape(t, b), 2<<20, "kvconnect_served_bytes_total", "op", "write", "result", "completed")
}

// TestMetricsOutOfBoundsRefused: ops outside the target's regions count
// as refused on the target, by reason, and as failed on the initiator.
func TestMetricsOutOfBoundsRefused(t *testing.T) {
	ctx := context.Background()
	a, b := metricsNode(t, connector.Config{}), metricsNode(t, connector.Config{})
	src, dst := alloc(t, a, 1<<20), alloc(t, b, 64<<10)
	peer, err := a.Open(ctx, b.SessionID())
	if err != nil {
		t.Fatal(err)
	}
	err = a.Transfer(ctx, peer,
		connector.Op{Kind: connector.OpWrite, LocalRegion: src.ID(), RemoteRegion: dst.ID(), RemoteOffset: 64<<10 - 8, Length: 4096},
		connector.Op{Kind: connector.OpRead, LocalRegion: src.ID(), RemoteRegion: dst.ID() + 100, Length: 10},
	)
	if !errors.Is(err, connector.ErrOutOfBounds) {
		t.Fatalf("out-of-bounds write: %v", err)
	}
	fb := scrape(t, b)
	want(t, fb, 1, "kvconnect_refusals_total", "transport", "tcp", "reason", "out_of_bounds")
	want(t, fb, 1, "kvconnect_refusals_total", "transport", "tcp", "reason", "unknown_region")
	want(t, fb, 0, "kvconnect_refusals_total", "transport", "tcp", "reason", "unauthenticated")
	want(t, fb, 1, "kvconnect_served_ops_total", "op", "write", "result", "refused")
	want(t, fb, 4096, "kvconnect_served_bytes_total", "op", "write", "result", "refused")
	want(t, fb, 0, "kvconnect_served_bytes_total", "op", "write", "result", "completed")
	fa := scrape(t, a)
	want(t, fa, 1, "kvconnect_initiated_ops_total", "op", "write", "result", "failed")
	want(t, fa, 1, "kvconnect_initiated_ops_total", "op", "read", "result", "failed")
}

// TestMetricsUnauthenticatedRefused: a node with auth on counts the
// handshake and data connections it refused for lack of the secret.
func TestMetricsUnauthenticatedRefused(t *testing.T) {
	c := metricsNode(t, connector.Config{AuthSecret: "metrics-test-secret-0123456789"}, connector.WithInProcess("tcp"))
	nc, err := net.Dial("tcp", c.SessionID())
	if err != nil {
		t.Fatal(err)
	}
	nc.Write([]byte{3, 0, 0, 0, 0, 0, 0, 0, 3, '{', '}'}) // a probe without the exchange
	nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	io.Copy(io.Discard, nc)
	nc.Close()
	_, ep, _ := strings.Cut(c.Status().Summary, " ")
	nc, err = net.Dial("tcp", ep)
	if err != nil {
		t.Fatal(err)
	}
	nc.Write(make([]byte, 64)) // a data connection without the exchange
	nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	io.Copy(io.Discard, nc)
	nc.Close()
	f := scrape(t, c)
	want(t, f, 1, "kvconnect_handshake_refusals_total", "reason", "unauthenticated")
	want(t, f, 1, "kvconnect_refusals_total", "transport", "tcp", "reason", "unauthenticated")
}

// TestMetricsSuspectPeer: a peer that stops answering (its serve process
// group SIGSTOPped) becomes suspect once, later batches fail fast, and
// the gauge shows it while it stays stopped.
func TestMetricsSuspectPeer(t *testing.T) {
	n := serve(t, nil)
	a := metricsNode(t, connector.Config{TransferTimeout: 2 * time.Second})
	ctx := context.Background()
	peer, err := a.Open(ctx, n.Session)
	if err != nil {
		t.Fatal(err)
	}
	src := alloc(t, a, 1<<20)
	dst := peer.Regions()[0].Addr
	write := func() error { return a.TransferSyncWrite(ctx, n.Session, src.Addr(), dst, 1<<20) }
	if err := write(); err != nil {
		t.Fatal(err)
	}
	testbin.Stop(t, n.PGID, true)
	defer syscall.Kill(-n.PGID, syscall.SIGCONT)
	if err := write(); !errors.Is(err, connector.ErrTimeout) {
		t.Fatalf("write to a stopped peer: %v, want ErrTimeout", err)
	}
	for range 3 {
		if err := write(); !errors.Is(err, connector.ErrPeerUnreachable) {
			t.Fatalf("write to a suspect peer: %v, want a fast ErrPeerUnreachable", err)
		}
	}
	f := scrape(t, a)
	want(t, f, 1, "kvconnect_peer_suspects_total")
	want(t, f, 3, "kvconnect_peer_fast_fails_total")
	want(t, f, 1, "kvconnect_peers_suspect")
	want(t, f, 1, "kvconnect_initiated_ops_total", "op", "write", "result", "timeout")
}

// TestMetricsEndpoint: the endpoint's pages, a port that is taken failing
// New at once naming it, and Close stopping the endpoint and leaving no
// goroutine behind.
func TestMetricsEndpoint(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	port := strconv.Itoa(taken.Addr().(*net.TCPAddr).Port)
	start := time.Now()
	_, err = connector.New(context.Background(), connector.Config{Protocol: "tcp", PluginDir: pluginDir(t), MetricsAddress: "127.0.0.1:" + port})
	if !errors.Is(err, connector.ErrInvalidArgument) || !strings.Contains(err.Error(), "port "+port) || !strings.Contains(err.Error(), "metrics_address") {
		t.Fatalf("metrics_address on a taken port: %v, want an error naming the port and metrics_address", err)
	}
	t.Logf("failed after %v: %v", time.Since(start), err)
	_, err = connector.New(context.Background(), connector.Config{Protocol: "tcp", PluginDir: pluginDir(t), MetricsAddress: "nope:nope"})
	if !errors.Is(err, connector.ErrInvalidArgument) || !strings.Contains(err.Error(), "metrics_address") {
		t.Fatalf("metrics_address nope:nope: %v", err)
	}

	goroutines := runtime.NumGoroutine()
	c, err := connector.New(context.Background(), connector.Config{Protocol: "tcp", PluginDir: pluginDir(t), MetricsAddress: ":0", BindAddress: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	addr := c.Status().MetricsAddress
	if host, _, _ := net.SplitHostPort(addr); host != "127.0.0.1" {
		t.Errorf("metrics_address :0 with bind_address 127.0.0.1 bound %s", addr)
	}
	for path, wantCode := range map[string]int{"/healthz": 200, "/readyz": 200, "/": 200, "/nope": 404} {
		if code, body := get(t, "http://"+addr+path); code != wantCode {
			t.Errorf("GET %s: %d %q, want %d", path, code, body, wantCode)
		}
	}
	_, body := get(t, "http://"+addr+"/status")
	var st connector.Status
	if err := json.Unmarshal([]byte(body), &st); err != nil || st.Session != c.SessionID() || st.MetricsAddress != addr {
		t.Errorf("/status: %v %+v", err, st)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if nc, err := net.Dial("tcp", addr); err == nil {
		nc.Close()
		t.Errorf("the metrics endpoint %s still accepts connections after Close", addr)
	}
	http.DefaultClient.CloseIdleConnections()
	testbin.Eventually(t, "goroutines to return to their count before the node", func() bool { return runtime.NumGoroutine() <= goroutines })
}

// TestWithMetricsRegistry: an embedder's registry gets the node's
// collectors (and the default registry nothing); a second node on it must
// be told apart with a label; Close takes the node's collectors away but
// the chain counters stay, so strict-mode refusals of Nodes that never
// started count.
func TestWithMetricsRegistry(t *testing.T) {
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	cfg := connector.Config{Protocol: "tcp", PluginDir: pluginDir(t)}
	node := func(name string) prometheus.Registerer {
		return prometheus.WrapRegistererWith(prometheus.Labels{"node": name}, reg)
	}
	a, err := connector.New(ctx, cfg, connector.WithMetrics(node("a")))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if a.Status().MetricsAddress != "" {
		t.Errorf("metrics_address %q without metrics_address set", a.Status().MetricsAddress)
	}
	f, err := metricstest.Scrape(ctx, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	want(t, f, 1, "kvconnect_transport_up", "transport", "tcp")
	want(t, f, 1, "kvconnect_transport_init_attempts_total", "transport", "tcp", "result", "ok")
	if _, found := f.Get("go_goroutines"); found {
		t.Error("WithMetrics registered Go runtime metrics on the embedder's registry")
	}
	if fams, err := prometheus.DefaultGatherer.Gather(); err == nil {
		for _, fam := range fams {
			if strings.HasPrefix(fam.GetName(), "kvconnect_") {
				t.Errorf("%s on the default registry", fam.GetName())
			}
		}
	}

	for _, r := range []prometheus.Registerer{node("a"), reg} {
		_, err = connector.New(ctx, cfg, connector.WithMetrics(r))
		if !errors.Is(err, connector.ErrInvalidArgument) || !strings.Contains(err.Error(), "WrapRegistererWith") {
			t.Fatalf("a second node on the same registry: %v, want ErrInvalidArgument saying how to tell them apart", err)
		}
	}
	b, err := connector.New(ctx, cfg, connector.WithMetrics(node("b")))
	if err != nil {
		t.Fatal(err)
	}
	f, _ = metricstest.Scrape(ctx, srv.URL)
	want(t, f, 2, "kvconnect_transport_up", "transport", "tcp")
	want(t, f, 1, "kvconnect_transport_up", "transport", "tcp", "node", "b")
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	f, _ = metricstest.Scrape(ctx, srv.URL)
	want(t, f, 1, "kvconnect_transport_up", "transport", "tcp")
	want(t, f, 1, "kvconnect_transport_up", "transport", "tcp", "node", "a")
	want(t, f, 1, "kvconnect_transport_init_attempts_total", "transport", "tcp", "node", "b", "result", "ok")

	strict := connector.Config{Protocol: "rdma", Fallback: []string{}, PluginDir: pluginDir(t)}
	reg2 := prometheus.NewRegistry()
	for range 2 {
		if _, err := connector.New(ctx, strict, connector.WithMetrics(reg2)); !errors.Is(err, connector.ErrUnavailable) {
			t.Fatalf("strict rdma: %v", err)
		}
	}
	srv2 := httptest.NewServer(promhttp.HandlerFor(reg2, promhttp.HandlerOpts{}))
	defer srv2.Close()
	f, err = metricstest.Scrape(ctx, srv2.URL)
	if err != nil {
		t.Fatal(err)
	}
	want(t, f, 2, "kvconnect_strict_refusals_total", "transport", "rdma")
	want(t, f, 2, "kvconnect_transport_init_attempts_total", "transport", "rdma", "result", "failed")
	if _, found := f.Get("kvconnect_transport_up"); found {
		t.Errorf("a node that never started left its collectors:\n%s", f.Dump("kvconnect_transport"))
	}
}

// TestMetricsMetadataEtcd runs two nodes on a real etcd with metrics on:
// the initiator's lookup and both nodes' publishes show under the etcd
// backend, and a stopped etcd shows as disconnected with an outage
// counted.
func TestMetricsMetadataEtcd(t *testing.T) {
	e := testservers.StartEtcd(t, testservers.EtcdOptions{})
	cfg := connector.Config{Metadata: e.URL(), MetadataTTL: time.Second, ConnectTimeout: 5 * time.Second}
	a, b := metricsNode(t, cfg), metricsNode(t, cfg)
	src, dst := alloc(t, a, 4096), alloc(t, b, 4096)
	ctx := context.Background()
	if _, err := a.Open(ctx, b.SessionID()); err != nil {
		t.Fatal(err)
	}
	if err := a.TransferSyncWrite(ctx, b.SessionID(), src.Addr(), dst.Addr(), 4096); err != nil {
		t.Fatal(err)
	}
	f := scrape(t, a)
	want(t, f, 1, "kvconnect_metadata_connected", "backend", "etcd")
	if v := f.Value("kvconnect_metadata_resolves_total", "backend", "etcd"); v < 1 {
		t.Errorf("resolves_total = %v after a lookup through etcd\n%s", v, f.Dump("kvconnect_metadata_resolves_total"))
	}
	if v := f.Value("kvconnect_metadata_publishes_total", "backend", "etcd"); v < 1 {
		t.Errorf("publishes_total = %v after the node published\n%s", v, f.Dump("kvconnect_metadata_publishes_total"))
	}
	if v := f.Value("kvconnect_metadata_resolve_duration_seconds", "backend", "etcd"); v < 1 {
		t.Errorf("resolve_duration_seconds (count) = %v\n%s", v, f.Dump("kvconnect_metadata_resolve_duration_seconds"))
	}
	e.Stop()
	testbin.Eventually(t, "the lost etcd in the metrics", func() bool {
		f := scrape(t, b)
		v, found := f.Get("kvconnect_metadata_connected", "backend", "etcd")
		return found && v == 0 && f.Value("kvconnect_metadata_outages_total", "backend", "etcd") >= 1
	})
}
