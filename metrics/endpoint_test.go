package metrics

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

type okProber struct{}

func (okProber) Health() error { return nil }
func (okProber) Ready() error  { return nil }
func (okProber) Status() any   { return map[string]string{"state": "up"} }

// TestEndpointServesUncompressed: /metrics answers in plain text even to
// a scraper that offers gzip (as Prometheus does), since compressing was
// a sixth of a scrape's CPU in the node.
func TestEndpointServesUncompressed(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "kvconnect_test_total", Help: "A test counter."})
	c.Add(42)
	reg.MustRegister(c)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := NewEndpoint(ln, reg, okProber{}, nil)
	e.Start()
	t.Cleanup(func() { e.Close(context.Background()) })

	req, err := http.NewRequest(http.MethodGet, "http://"+e.Addr().String()+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	// Set by hand, the transport leaves the body as it came.
	req.Header.Set("Accept-Encoding", "gzip, deflate, zstd")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	if enc := resp.Header.Get("Content-Encoding"); enc != "" {
		t.Errorf("Content-Encoding %q, want none", enc)
	}
	if !strings.Contains(string(body), "kvconnect_test_total 42\n") {
		t.Errorf("body is not the registry in text format:\n%.300q", body)
	}
}
