package metadata

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kvconnect/kvconnect/errdefs"
)

// maxHTTPValue bounds a value the HTTP client reads.
const maxHTTPValue = 64 << 20

// httpKV speaks Mooncake's HTTP metadata protocol: GET|PUT|DELETE
// <url>?key=<escaped key>, JSON bodies, 200 is success and 404 on GET a
// missing key.
type httpKV struct {
	url    string
	client *http.Client
	user   string
	pass   string
}

// httpStatusError is a reply other than 200 (and 404 on GET).
type httpStatusError struct {
	code int
	body string
}

func (e *httpStatusError) Error() string {
	if e.body == "" {
		return "HTTP " + strconv.Itoa(e.code)
	}
	return fmt.Sprintf("HTTP %d: %s", e.code, e.body)
}

func openHTTP(ctx context.Context, s *settings) (Service, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 16
	tr.DialContext = (&net.Dialer{Timeout: s.ConnectTimeout, KeepAlive: 30 * time.Second}).DialContext
	switch {
	case s.target.TLS:
		cfg, err := s.TLS.Config()
		if err != nil {
			return nil, err
		}
		tr.TLSClientConfig = cfg
	case s.TLS.Set():
		return nil, fmt.Errorf("metadata: %w: %s: TLS files are set but the URL is http://; use https:// for TLS",
			errdefs.ErrInvalidArgument, s.target)
	}
	kv := &httpKV{url: s.target.URL, client: &http.Client{Transport: tr, Timeout: s.ConnectTimeout, CheckRedirect: sameMethod},
		user: s.Username, pass: string(s.Password)}
	if err := kv.probe(ctx, s); err != nil {
		tr.CloseIdleConnections()
		return nil, err
	}
	return newTTLService(s, kv), nil
}

// sameMethod follows a redirect only when it keeps the method (307,
// 308): after a 301, 302 or 303 a PUT or DELETE would be sent as a GET,
// whose 200 or 404 would pass for the write or the delete.
func sameMethod(req *http.Request, via []*http.Request) error {
	if len(via) >= 10 {
		return errors.New("stopped after 10 redirects")
	}
	if req.Method != via[len(via)-1].Method {
		return http.ErrUseLastResponse
	}
	return nil
}

// probe writes, reads back and deletes a key of its own: a 404 alone
// cannot tell a missing key from a wrong URL path.
func (h *httpKV) probe(ctx context.Context, s *settings) error {
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	key := s.keys.Prefix() + "kvconnect-probe-" + hex.EncodeToString(rnd[:])
	value := []byte(`{"name":"kvconnect-probe"}`)
	if err := h.put(ctx, []kvPair{{key, value}}, s.TTL); err != nil {
		return h.wrap("probe: put", key, err)
	}
	got, err := h.get(ctx, key)
	switch {
	case err != nil:
		return h.wrap("probe: get", key, err)
	case !bytes.Equal(got, value):
		return h.wrap("probe: get", key, fmt.Errorf("%w: read back %s, wrote %s: is this a metadata server?", errdefs.ErrProtocol, snippet(got), value))
	}
	if err := h.del(ctx, []string{key}); err != nil {
		return h.wrap("probe: delete", key, err)
	}
	return nil
}

func (h *httpKV) do(ctx context.Context, method, key string, body []byte, ttl time.Duration) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, h.url+"?key="+EscapeKey(key), rd)
	if err != nil {
		return 0, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if ttl > 0 {
		req.Header.Set(TTLHeader, ttl.String())
	}
	if h.user != "" || h.pass != "" {
		req.SetBasicAuth(h.user, h.pass)
	}
	resp, err := h.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) { // the URL is named by wrap
			err = cleanDialError(ue.Err)
		}
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxHTTPValue+1))
	if err != nil {
		return 0, nil, err
	}
	if len(b) > maxHTTPValue {
		return 0, nil, fmt.Errorf("%w: value of key %s is larger than %d bytes", errdefs.ErrProtocol, key, maxHTTPValue)
	}
	if resp.StatusCode >= 300 && resp.StatusCode < 400 {
		// A redirect not followed (sameMethod): say where it pointed.
		b = []byte(fmt.Sprintf("a redirect to %q, not followed for a %s (it would be sent as a GET): set metadata to the URL the server wants", resp.Header.Get("Location"), method))
	}
	return resp.StatusCode, b, nil
}

func statusError(code int, body []byte) error {
	s := strings.TrimSpace(string(body))
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return &httpStatusError{code: code, body: s}
}

func (h *httpKV) get(ctx context.Context, key string) ([]byte, error) {
	code, b, err := h.do(ctx, http.MethodGet, key, nil, 0)
	switch {
	case err != nil:
		return nil, err
	case code == http.StatusNotFound:
		return nil, nil
	case code != http.StatusOK:
		return nil, statusError(code, b)
	}
	return b, nil
}

func (h *httpKV) getMany(ctx context.Context, keys []string) (map[string][]byte, error) {
	out := make(map[string][]byte, len(keys))
	var mu sync.Mutex
	var first error
	work := make(chan string)
	var wg sync.WaitGroup
	for range min(len(keys), 8) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range work {
				v, err := h.get(ctx, k)
				mu.Lock()
				switch {
				case err != nil && first == nil:
					first = err
				case v != nil:
					out[k] = v
				}
				mu.Unlock()
			}
		}()
	}
	for _, k := range keys {
		mu.Lock()
		stop := first != nil
		mu.Unlock()
		if stop {
			break
		}
		work <- k
	}
	close(work)
	wg.Wait()
	if first != nil {
		return nil, first
	}
	return out, nil
}

func (h *httpKV) put(ctx context.Context, kvs []kvPair, ttl time.Duration) error {
	for _, kv := range kvs {
		code, b, err := h.do(ctx, http.MethodPut, kv.key, kv.value, ttl)
		if err != nil {
			return err
		}
		if code != http.StatusOK {
			return statusError(code, b)
		}
	}
	return nil
}

func (h *httpKV) del(ctx context.Context, keys []string) error {
	for _, k := range keys {
		code, b, err := h.do(ctx, http.MethodDelete, k, nil, 0)
		if err != nil {
			return err
		}
		if code != http.StatusOK && code != http.StatusNotFound {
			return statusError(code, b)
		}
	}
	return nil
}

// transient: no answer, or a 5xx (a proxy in front of a server that is down).
func (h *httpKV) transient(err error) bool {
	var se *httpStatusError
	if errors.As(err, &se) {
		return se.code >= 500
	}
	return !errors.Is(err, errdefs.ErrProtocol)
}

func (h *httpKV) wrap(what, key string, err error) error {
	sentinel := errdefs.ErrPeerUnreachable
	var se *httpStatusError
	var ce *tls.CertificateVerificationError
	switch {
	case errors.As(err, &se) && (se.code == http.StatusUnauthorized || se.code == http.StatusForbidden):
		sentinel = errdefs.ErrUnauthenticated
	case errors.As(err, &se) && se.code < 500:
		sentinel = errdefs.ErrProtocol
	case errors.As(err, &ce):
		sentinel = errdefs.ErrUnauthenticated
	case errors.Is(err, errdefs.ErrProtocol):
		return fmt.Errorf("metadata: %s %s: %s %s: %w", "http", h.url, what, key, err)
	case errors.Is(err, context.Canceled):
		sentinel = errdefs.ErrCanceled
	}
	return fmt.Errorf("metadata: %w: %s: %s %s: %v", sentinel, h.url, what, key, err)
}

func (h *httpKV) close() error {
	h.client.CloseIdleConnections()
	return nil
}
