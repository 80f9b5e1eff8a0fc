package metadata

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeClock is a settable clock for the server's expiry.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func do(t *testing.T, h http.Handler, method, target, body string, header ...string) (int, string, http.Header) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, target, rd)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Code, rec.Body.String(), rec.Header()
}

// TestServerProtocol: the answers of Mooncake's reference server
// (example/http-metadata-server), for the requests Mooncake's client
// sends (curl_easy_escape'd keys).
func TestServerProtocol(t *testing.T) {
	s := NewServer(ServerOptions{})
	key := "mooncake/ram/10.0.0.1:15432"
	url := "/metadata?key=" + EscapeKey(key)
	steps := []struct {
		method, target, body string
		code                 int
		want                 string
	}{
		{"GET", url, "", 404, "metadata not found"},
		{"PUT", url, `{"name":"10.0.0.1:15432"}`, 200, "metadata updated"},
		{"GET", url, "", 200, `{"name":"10.0.0.1:15432"}`},
		{"GET", "/metadata?key=mooncake/ram/10.0.0.1:15432", "", 200, `{"name":"10.0.0.1:15432"}`}, // unescaped reads the same key
		{"PUT", url, `{"name":"10.0.0.1:15432","v":2}`, 200, "metadata updated"},
		{"GET", url, "", 200, `{"name":"10.0.0.1:15432","v":2}`},
		{"DELETE", url, "", 200, "metadata deleted"},
		{"GET", url, "", 404, "metadata not found"},
		{"DELETE", url, "", 200, "metadata deleted"}, // Mooncake's Go server: 200 for a missing key too
		{"PUT", url, `not json`, 400, "not JSON"},
		{"GET", "/metadata", "", 400, "key query parameter"},
		{"GET", "/metadata?key=", "", 400, "key query parameter"},
		{"GET", "/metadata?key=a&key=b", "", 400, "exactly one"},
		{"GET", "/other?key=a", "", 404, `no such path "/other"`},
		{"POST", url, `{}`, 405, "not allowed"},
		{"PUT", url, `{"name":"x"}`, 400, "Kvconnect-Ttl"}, // with a bad TTL header, below
	}
	for i, st := range steps {
		var hdr []string
		if i == len(steps)-1 {
			hdr = []string{TTLHeader, "soon"}
		}
		code, body, h := do(t, s, st.method, st.target, st.body, hdr...)
		if code != st.code || !strings.Contains(body, st.want) {
			t.Errorf("step %d: %s %s = %d %q, want %d %q", i, st.method, st.target, code, body, st.code, st.want)
		}
		if code == 200 && st.method == "GET" && h.Get("Content-Type") != "application/json; charset=utf-8" {
			t.Errorf("step %d: Content-Type %q", i, h.Get("Content-Type"))
		}
		if code == 405 && h.Get("Allow") != "GET, PUT, DELETE" {
			t.Errorf("step %d: Allow %q", i, h.Get("Allow"))
		}
	}
	st := s.Stats()
	if st.Entries != 0 || st.Puts != 2 || st.Deletes != 2 {
		t.Errorf("stats %+v", st)
	}
}

// TestServerExpiry: an entry lives TTL after its last PUT, or what the
// PUT's TTL header says; a PUT refreshes; TTL < 0 keeps entries.
func TestServerExpiry(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1e9, 0)}
	s := NewServer(ServerOptions{TTL: 30 * time.Second, Now: clock.Now})
	get := func(key string) int { code, _, _ := do(t, s, "GET", "/metadata?key="+key, ""); return code }
	do(t, s, "PUT", "/metadata?key=a", `{"name":"a"}`)
	do(t, s, "PUT", "/metadata?key=b", `{"name":"b"}`, TTLHeader, "5s")
	clock.Advance(4 * time.Second)
	if get("a") != 200 || get("b") != 200 {
		t.Fatal("entries gone early")
	}
	do(t, s, "PUT", "/metadata?key=b", `{"name":"b"}`, TTLHeader, "5s") // refresh
	clock.Advance(4 * time.Second)
	if get("b") != 200 {
		t.Error("a PUT did not refresh b")
	}
	clock.Advance(2 * time.Second)
	if get("b") != 404 {
		t.Error("b outlived its 5s TTL")
	}
	clock.Advance(20 * time.Second) // a: 30s after its PUT
	if get("a") != 404 {
		t.Error("a outlived the server's 30s TTL")
	}
	do(t, s, "PUT", "/metadata?key=c", `{"name":"c"}`)
	clock.Advance(time.Minute)
	do(t, s, "PUT", "/metadata?key=d", `{"name":"d"}`) // sweeps c
	if st := s.Stats(); st.Entries != 1 || st.Expired != 3 {
		t.Errorf("stats %+v, want c swept", st)
	}

	forever := NewServer(ServerOptions{TTL: -1, Now: clock.Now})
	do(t, forever, "PUT", "/metadata?key=m", `{"name":"m"}`)
	clock.Advance(1000 * time.Hour)
	if code, _, _ := do(t, forever, "GET", "/metadata?key=m", ""); code != 200 {
		t.Error("TTL < 0 expired an entry")
	}
}

func TestServerBodyLimit(t *testing.T) {
	s := NewServer(ServerOptions{MaxBody: 100})
	ok := `{"name":"` + strings.Repeat("a", 80) + `"}`
	if code, body, _ := do(t, s, "PUT", "/metadata?key=k", ok); code != 200 {
		t.Fatalf("%d bytes: %d %s", len(ok), code, body)
	}
	big := `{"name":"` + strings.Repeat("a", 200) + `"}`
	code, body, _ := do(t, s, "PUT", "/metadata?key=k", big)
	if code != 413 || !strings.Contains(body, "larger than 100 bytes") {
		t.Errorf("%d bytes: %d %q, want 413", len(big), code, body)
	}
	if _, body, _ := do(t, s, "GET", "/metadata?key=k", ""); body != ok {
		t.Errorf("the refused PUT changed the entry: %q", body)
	}
	if NewServer(ServerOptions{}).maxBody != 1<<20 {
		t.Error("default body limit is not 1 MiB")
	}
}

// TestServerHoldsAtMostMaxBytes: a PUT that would take the server past
// MaxBytes (keys and values) is refused with 507 and changes nothing; a
// replacement counts only its growth; a DELETE or an expiry makes room. A
// TTL asked for above MaxTTL is refused. Before, any client could fill the
// server's memory, and make entries all but permanent.
func TestServerHoldsAtMostMaxBytes(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1000, 0)}
	s := NewServer(ServerOptions{MaxBytes: 1000, MaxTTL: time.Hour, Now: clock.Now})
	val := func(n int) string { return `"` + strings.Repeat("v", n-2) + `"` } // n bytes of JSON
	put := func(key string, n int, header ...string) (int, string) {
		code, body, _ := do(t, s, "PUT", "/metadata?key="+key, val(n), header...)
		return code, body
	}
	if code, body := put("a", 599); code != 200 {
		t.Fatalf("600 of 1000 bytes: %d %s", code, body)
	}
	code, body := put("b", 500)
	if code != http.StatusInsufficientStorage || !strings.Contains(body, "--max-bytes") || !strings.Contains(body, "600") {
		t.Fatalf("1101 of 1000 bytes: %d %q, want 507 saying what the server holds", code, body)
	}
	if code, _, _ := do(t, s, "GET", "/metadata?key=b", ""); code != 404 {
		t.Fatalf("the refused PUT stored its entry: GET %d", code)
	}
	if code, body := put("a", 899); code != 200 {
		t.Fatalf("replacing a's 599 bytes with 899 (900 of 1000 held): %d %s", code, body)
	}
	if code, _ := put("a", 1000); code != http.StatusInsufficientStorage {
		t.Fatalf("replacing a with 1000 bytes (1001 held): %d, want 507", code)
	}
	do(t, s, "DELETE", "/metadata?key=a", "")
	if code, body := put("b", 500, TTLHeader, "30s"); code != 200 {
		t.Fatalf("after the DELETE: %d %s", code, body)
	}
	clock.Advance(time.Minute) // b expires
	if code, body := put("c", 900); code != 200 {
		t.Fatalf("after b expired: %d %s", code, body)
	}
	if code, body := put("d", 10, TTLHeader, "100000h"); code != 400 || !strings.Contains(body, "--max-ttl") {
		t.Fatalf("a TTL of 100000h: %d %q, want 400 naming --max-ttl", code, body)
	}
}

// TestServerConcurrent: many clients over real HTTP at once (run with
// -race).
func TestServerConcurrent(t *testing.T) {
	s := NewServer(ServerOptions{})
	hs := httptest.NewServer(s)
	defer hs.Close()
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := hs.Client()
			for i := range 50 {
				key := EscapeKey(fmt.Sprintf("mooncake/ram/n%d-%d", w, i%5))
				body := fmt.Sprintf(`{"name":"n%d","i":%d}`, w, i)
				req, _ := http.NewRequest("PUT", hs.URL+"/metadata?key="+key, strings.NewReader(body))
				resp, err := c.Do(req)
				if err != nil {
					errs <- err
					return
				}
				resp.Body.Close()
				resp, err = c.Get(hs.URL + "/metadata?key=" + key)
				if err != nil {
					errs <- err
					return
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 || string(b) != body {
					errs <- fmt.Errorf("worker %d: GET after PUT: %d %s, want %s", w, resp.StatusCode, b, body)
					return
				}
				if i%7 == 0 {
					req, _ := http.NewRequest("DELETE", hs.URL+"/metadata?key="+key, nil)
					if resp, err := c.Do(req); err == nil {
						resp.Body.Close()
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// FuzzServer sends arbitrary requests (method, raw query, TTL header,
// body) to the server: it must answer with a status it documents, never
// panic, and a PUT that succeeded must be readable back unchanged.
func FuzzServer(f *testing.F) {
	f.Add("PUT", "key=mooncake%2Fram%2Fa", "10s", []byte(`{"name":"a"}`))
	f.Add("GET", "key=a&key=b", "", []byte(nil))
	f.Add("DELETE", "key=%zz", "", []byte(nil))
	f.Add("PUT", "key=x", "-1s", []byte(`[]`))
	f.Add("PATCH", "", "", []byte("{"))
	s := NewServer(ServerOptions{MaxBody: 1 << 10})
	f.Fuzz(func(t *testing.T, method, query, ttl string, body []byte) {
		req, err := http.NewRequest(method, "http://meta/metadata?"+query, strings.NewReader(string(body)))
		if err != nil {
			return // not a request a client could send
		}
		if ttl != "" {
			req.Header.Set(TTLHeader, ttl)
		}
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		switch rec.Code {
		case 200, 400, 404, 405, 413:
		default:
			t.Fatalf("%s ?%s: status %d", method, query, rec.Code)
		}
		if d, _ := time.ParseDuration(ttl); method == "PUT" && rec.Code == 200 && (ttl == "" || d >= time.Second) {
			// The URL the PUT was sent to (httptest.NewRequest would parse
			// it as a request line, where a space in the query breaks it).
			get, err := http.NewRequest("GET", "http://meta/metadata?"+query, nil)
			if err != nil {
				t.Fatalf("GET ?%s after its PUT: %v", query, err)
			}
			rec := httptest.NewRecorder()
			s.ServeHTTP(rec, get)
			if rec.Code != 200 || rec.Body.String() != string(body) {
				t.Fatalf("PUT ?%s %q then GET: %d %q", query, body, rec.Code, rec.Body.String())
			}
		}
	})
}
