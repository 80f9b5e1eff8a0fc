package metadata

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kvconnect/kvconnect/errdefs"
	"github.com/kvconnect/kvconnect/internal/testbin"
	"github.com/kvconnect/kvconnect/internal/testservers"
)

// metaServer is a kvconnect HTTP metadata server on a fixed loopback
// port that can be stopped and started again (with its entries, or
// without: a restarted process).
type metaServer struct {
	t    *testing.T
	addr string
	srv  *Server
	hs   *http.Server
	done chan struct{}
	reqs atomic.Int64 // requests served
	// seen records the raw query of each request.
	mu   sync.Mutex
	seen []string
}

func startMetaServer(t *testing.T, o ServerOptions) *metaServer {
	t.Helper()
	m := &metaServer{t: t, srv: NewServer(o)}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m.addr = ln.Addr().String()
	m.serve(ln)
	t.Cleanup(m.stop)
	return m
}

func (m *metaServer) serve(ln net.Listener) {
	m.hs = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.reqs.Add(1)
		m.mu.Lock()
		m.seen = append(m.seen, r.Method+" "+r.URL.RawQuery)
		m.mu.Unlock()
		m.srv.ServeHTTP(w, r)
	})}
	m.done = make(chan struct{})
	go func() {
		defer close(m.done)
		m.hs.Serve(ln)
	}()
}

func (m *metaServer) url() string { return "http://" + m.addr + "/metadata" }

func (m *metaServer) stop() {
	if m.hs == nil {
		return
	}
	m.hs.Close()
	<-m.done
	m.hs = nil
}

// restart stops the server and starts it on the same port; fresh drops
// every entry, as a restarted process would.
func (m *metaServer) restart(fresh bool, o ServerOptions) {
	m.t.Helper()
	m.stop()
	if fresh {
		m.srv = NewServer(o)
	}
	var ln net.Listener
	var err error
	for range 100 { // the port is ours, but the kernel may lag
		if ln, err = net.Listen("tcp", m.addr); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		m.t.Fatal(err)
	}
	m.serve(ln)
}

func (m *metaServer) get(key string) (int, string) {
	resp, err := http.Get(m.url() + "?key=" + EscapeKey(key))
	if err != nil {
		m.t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return resp.StatusCode, b.String()
}

// TestHTTPPublishResolve: Mooncake's protocol on the wire (escaped keys),
// the server's TTL from the client, cached resolves, Close deletes.
func TestHTTPPublishResolve(t *testing.T) {
	noLeaks(t)
	m := startMetaServer(t, ServerOptions{})
	a, err := Open(ctxT(t), Options{URL: m.url(), TTL: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	d := descriptor("10.0.0.1:15001", 1)
	if err := a.Publish(ctxT(t), "10.0.0.1:15001", d, RPCLocation{Host: "10.0.0.1", Port: 15001}); err != nil {
		t.Fatal(err)
	}
	if code, body := m.get("mooncake/ram/10.0.0.1:15001"); code != 200 || body != string(d) {
		t.Errorf("ram key: %d %q", code, body)
	}
	if _, body := m.get("mooncake/rpc_meta/10.0.0.1:15001"); body != `{"ip_or_host_name":"10.0.0.1","rpc_port":15001}` {
		t.Errorf("rpc_meta key: %q", body)
	}
	m.mu.Lock()
	wire := strings.Join(m.seen, "\n")
	m.mu.Unlock()
	if !strings.Contains(wire, "PUT key=mooncake%2Fram%2F10.0.0.1%3A15001") {
		t.Errorf("requests on the wire:\n%s\nwant Mooncake's escaping", wire)
	}

	b := openT(t, Options{URL: m.url(), RefreshInterval: time.Minute})
	if got, err := b.Resolve(ctxT(t), "10.0.0.1:15001"); err != nil || string(got) != string(d) {
		t.Fatalf("Resolve = %s, %v", got, err)
	}
	if loc, err := b.ResolveRPC(ctxT(t), "10.0.0.1:15001"); err != nil || loc.Port != 15001 {
		t.Errorf("ResolveRPC = %+v, %v", loc, err)
	}
	gets := m.srv.Stats().Gets
	for range 100 {
		if _, err := b.Resolve(ctxT(t), "10.0.0.1:15001"); err != nil {
			t.Fatal(err)
		}
	}
	if g := m.srv.Stats().Gets; g != gets {
		t.Errorf("100 cached resolves sent %d GETs", g-gets)
	}
	if _, err := b.Resolve(ctxT(t), "nobody"); !errors.Is(err, errdefs.ErrUnknownPeer) || !strings.Contains(err.Error(), "mooncake/ram/nobody") {
		t.Errorf("missing: %v", err)
	}
	if err := a.Close(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if code, _ := m.get("mooncake/ram/10.0.0.1:15001"); code != 404 {
		t.Errorf("after Close: %d, want 404", code)
	}
}

// TestHTTPNodeKilled: a killed node's entries expire on the server after
// the TTL the node sent, and the resolver's Gone fires.
func TestHTTPNodeKilled(t *testing.T) {
	m := startMetaServer(t, ServerOptions{TTL: time.Hour}) // the node's own TTL (helperTTL) wins
	b := openT(t, Options{URL: m.url(), RefreshInterval: 100 * time.Millisecond})
	node := startNode(t, m.url(), "", "victim")
	if _, err := b.Resolve(ctxT(t), "victim"); err != nil {
		t.Fatal(err)
	}
	gone := b.Gone("victim")
	node.renewed(t, 2)
	if code, _ := m.get("mooncake/ram/victim"); code != 200 {
		t.Fatal("the entry expired while its node was alive")
	}
	node.Process.Signal(syscall.SIGKILL)
	node.Wait()
	testbin.WaitClosed(t, gone, "Gone after kill -9")
	// The node PUT its two keys one after the other, so rpc_meta may
	// expire a moment after ram (longer on a loaded machine).
	testbin.Eventually(t, "rpc_meta to expire after the ram entry", func() bool {
		code, _ := m.get("mooncake/rpc_meta/victim")
		return code == 404
	})
}

// TestHTTPRestart: the server restarts empty; the node notices, logs it
// once and writes its entries again.
func TestHTTPRestart(t *testing.T) {
	noLeaks(t)
	m := startMetaServer(t, ServerOptions{})
	log, logs := observed()
	a := openT(t, Options{URL: m.url(), TTL: 1500 * time.Millisecond, ConnectTimeout: 300 * time.Millisecond, Log: log})
	if err := a.Publish(ctxT(t), "n1", descriptor("n1", 1), rpcOf(15001)); err != nil {
		t.Fatal(err)
	}
	m.stop()
	testbin.Eventually(t, "the node notices the outage", func() bool { return !a.Status().Connected })
	time.Sleep(300 * time.Millisecond)
	m.restart(true, ServerOptions{})
	testbin.Eventually(t, "republished", func() bool { code, _ := m.get("mooncake/ram/n1"); return code == 200 })
	testbin.Eventually(t, "connected", func() bool { return a.Status().Connected })
	// The counters move after the PUT that brought the node back has
	// returned, a moment after the server holds the key: wait for them.
	testbin.Eventually(t, "the republish counted", func() bool { return a.Status().Republishes >= 1 })
	if st := a.Status(); st.Outages != 1 {
		t.Errorf("status %+v", st.Counters)
	}
	if n := logs.FilterMessageSnippet("metadata service lost").Len(); n != 1 {
		t.Errorf("%d 'lost' lines, want 1", n)
	}
}

// TestHTTPErrors: unreachable, a server that is not a metadata server,
// authentication refused, garbage in an entry.
func TestHTTPErrors(t *testing.T) {
	noLeaks(t)
	start := time.Now()
	_, err := Open(context.Background(), Options{URL: "http://127.0.0.1:1/metadata", ConnectTimeout: time.Second})
	if !errors.Is(err, errdefs.ErrPeerUnreachable) || !strings.Contains(err.Error(), "127.0.0.1:1") || time.Since(start) > time.Second+hang {
		t.Errorf("unreachable: %v after %s", err, time.Since(start))
	}
	m := startMetaServer(t, ServerOptions{})
	_, err = Open(context.Background(), Options{URL: "http://" + m.addr + "/wrong", ConnectTimeout: time.Second})
	if !errors.Is(err, errdefs.ErrProtocol) || !strings.Contains(err.Error(), "HTTP 404") || !strings.Contains(err.Error(), "/wrong") || !strings.Contains(err.Error(), "probe: put") {
		t.Errorf("wrong path: %v", err)
	}
	auth := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != "kv" || p != "pw" {
			http.Error(w, "who are you", http.StatusUnauthorized)
			return
		}
		m.srv.ServeHTTP(w, r)
	}))
	defer auth.Close()
	if _, err := Open(context.Background(), Options{URL: auth.URL + "/metadata", ConnectTimeout: time.Second}); !errors.Is(err, errdefs.ErrUnauthenticated) || !strings.Contains(err.Error(), "401") {
		t.Errorf("no credentials: %v", err)
	}
	s := openT(t, Options{URL: auth.URL + "/metadata", Username: "kv", Password: "pw"})
	if err := s.Publish(ctxT(t), "n1", descriptor("n1", 1), rpcOf(1)); err != nil {
		t.Errorf("basic auth: %v", err)
	}
	m.srv.put("mooncake/ram/bad", []byte(`[1,2]`), 0)
	if _, err := s.Resolve(ctxT(t), "bad"); !errors.Is(err, errdefs.ErrProtocol) || !strings.Contains(err.Error(), "mooncake/ram/bad") {
		t.Errorf("garbage: %v", err)
	}
}

// TestServiceConcurrent: many goroutines publish, resolve and ask for
// Gone at once on every backend there is a server for (run with -race).
func TestServiceConcurrent(t *testing.T) {
	noLeaks(t)
	m := startMetaServer(t, ServerOptions{})
	a := openT(t, Options{URL: m.url(), RefreshInterval: 50 * time.Millisecond})
	b := openT(t, Options{URL: m.url(), RefreshInterval: 50 * time.Millisecond})
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			seg := "n" + string(rune('a'+w))
			for i := range 20 {
				if err := a.Publish(ctxT(t), seg, descriptor(seg, i), rpcOf(15000+w)); err != nil {
					t.Error(err)
					return
				}
				if _, err := b.Resolve(ctxT(t), seg); err != nil {
					t.Error(err)
					return
				}
				b.Gone(seg)
				b.Status()
			}
		}()
	}
	wg.Wait()
}

// TestPublishRacingClose: publishes racing Close either finish before it
// (and Close removes their keys) or fail with ErrClosed; no key survives.
func TestPublishRacingClose(t *testing.T) {
	noLeaks(t)
	e := testservers.StartEtcd(t, testservers.EtcdOptions{})
	cli := e.Client(t)
	m := startMetaServer(t, ServerOptions{})
	for _, url := range []string{e.URL(), m.url()} {
		s, err := Open(ctxT(t), Options{URL: url, ConnectTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for w := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					seg := fmt.Sprintf("n%d-%d", w, i)
					err := s.Publish(ctxT(t), seg, descriptor(seg, 1), rpcOf(15001))
					if errors.Is(err, errdefs.ErrClosed) {
						return
					}
					if err != nil {
						t.Errorf("%s: %v", url, err)
						return
					}
				}
			}()
		}
		time.Sleep(50 * time.Millisecond)
		if err := s.Close(ctxT(t)); err != nil {
			t.Errorf("%s: Close: %v", url, err)
		}
		wg.Wait()
		if url == e.URL() {
			resp, err := cli.Get(ctxT(t), "mooncake/", clientv3.WithPrefix(), clientv3.WithCountOnly())
			if err != nil || resp.Count != 0 {
				t.Errorf("etcd: %d keys left after Close (%v)", resp.Count, err)
			}
		} else if n := m.srv.Stats().Entries; n != 0 {
			t.Errorf("http: %d entries left after Close", n)
		}
	}
}

// TestHTTPRedirects: a redirect that keeps the method (307, 308) is
// followed; one that would turn a PUT or DELETE into a GET (301, 302, 303)
// is an error naming where it points, not a GET whose answer passes for
// the write.
func TestHTTPRedirects(t *testing.T) {
	m := startMetaServer(t, ServerOptions{})
	for _, code := range []int{http.StatusTemporaryRedirect, http.StatusPermanentRedirect, http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther} {
		redir := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, m.url()+"?"+r.URL.RawQuery, code)
		}))
		s, err := Open(ctxT(t), Options{URL: redir.URL + "/old", ConnectTimeout: 5 * time.Second})
		if code == http.StatusTemporaryRedirect || code == http.StatusPermanentRedirect {
			if err != nil {
				t.Errorf("HTTP %d: %v; want it followed", code, err)
			} else {
				s.Close(ctxT(t))
			}
		} else if err == nil || !strings.Contains(err.Error(), "redirect to") || !strings.Contains(err.Error(), m.url()) {
			if s != nil {
				s.Close(ctxT(t))
			}
			t.Errorf("HTTP %d: %v; want an error naming the redirect", code, err)
		}
		redir.Close()
	}
}
