package metadata

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Server defaults.
const (
	DefaultServerPath    = "/metadata"
	DefaultServerTTL     = 30 * time.Second
	DefaultServerMaxBody = 1 << 20
	// DefaultServerMaxBytes bounds what a Server holds (keys and values).
	DefaultServerMaxBytes = 1 << 30
	// DefaultServerMaxTTL bounds the TTL a client may ask for.
	DefaultServerMaxTTL = 24 * time.Hour
)

// TTLHeader is the request header with which kvconnect's HTTP client tells
// a kvconnect metadata server how long to keep a PUT entry (a Go duration,
// "10s"). Mooncake's servers ignore it, and Mooncake's client does not send
// it: its entries get the server's default TTL.
const TTLHeader = "Kvconnect-Ttl"

// ServerOptions configures an HTTP metadata server.
type ServerOptions struct {
	// Path is the one path served. Default /metadata (Mooncake's).
	Path string
	// TTL is how long an entry lives after its last PUT when the client
	// does not say (Mooncake's clients never do, and never refresh:
	// give them 0). kvconnect clients send TTLHeader with their own TTL,
	// which wins. Default 30s; negative means entries never expire.
	TTL time.Duration
	// MaxBody bounds a PUT body; larger ones get 413. Default 1 MiB.
	MaxBody int64
	// MaxBytes bounds what the server holds, keys and values together: a
	// PUT that would go past it gets 507. Default 1 GiB.
	MaxBytes int64
	// MaxTTL bounds the TTL a PUT's TTLHeader may ask for (more: 400).
	// Default 24h.
	MaxTTL time.Duration
	// Now is the clock (tests); default time.Now.
	Now func() time.Time
}

// Server is an HTTP metadata server speaking Mooncake's protocol:
//
//	GET    <path>?key=K   200 with the stored bytes (application/json), 404 "metadata not found"
//	PUT    <path>?key=K   stores the body (JSON), 200 "metadata updated"
//	DELETE <path>?key=K   200 "metadata deleted" (also for a missing key, as Mooncake's Go server)
//
// as Mooncake's reference server (example/http-metadata-server) does, plus
// expiry: an entry lives TTL (or what the PUT's TTLHeader says) after its
// last PUT, so a node that dies without deleting its keys vanishes. A PUT
// body that is not JSON gets 400, a larger one than MaxBody 413, another
// method 405, another path 404.
//
// A Server is an http.Handler, safe for concurrent use. It starts no
// goroutine: expired entries are dropped as requests come.
type Server struct {
	path    string
	ttl     time.Duration
	maxBody int64
	now     func() time.Time

	maxBytes int64
	maxTTL   time.Duration

	mu        sync.Mutex
	entries   map[string]serverEntry
	held      int64 // bytes of keys and values in entries
	lastSweep time.Time

	gets, puts, deletes, expired atomic.Uint64
}

type serverEntry struct {
	value   []byte
	expires time.Time // zero: never
}

// ServerStats counts what a Server did.
type ServerStats struct {
	Entries int    `json:"entries"`
	Gets    uint64 `json:"gets"`
	Puts    uint64 `json:"puts"`
	Deletes uint64 `json:"deletes"`
	Expired uint64 `json:"expired"`
}

// NewServer returns a Server with o's settings (zero fields take the
// defaults).
func NewServer(o ServerOptions) *Server {
	s := &Server{path: o.Path, ttl: o.TTL, maxBody: o.MaxBody, now: o.Now, entries: map[string]serverEntry{}}
	if s.path == "" {
		s.path = DefaultServerPath
	}
	if s.ttl == 0 {
		s.ttl = DefaultServerTTL
	}
	if s.maxBody <= 0 {
		s.maxBody = DefaultServerMaxBody
	}
	if s.maxBytes = o.MaxBytes; s.maxBytes <= 0 {
		s.maxBytes = DefaultServerMaxBytes
	}
	if s.maxTTL = o.MaxTTL; s.maxTTL <= 0 {
		s.maxTTL = DefaultServerMaxTTL
	}
	if s.now == nil {
		s.now = time.Now
	}
	return s
}

// Path is the path the server answers on.
func (s *Server) Path() string { return s.path }

// Stats returns the server's counters.
func (s *Server) Stats() ServerStats {
	s.mu.Lock()
	n := len(s.entries)
	s.mu.Unlock()
	return ServerStats{Entries: n, Gets: s.gets.Load(), Puts: s.puts.Load(), Deletes: s.deletes.Load(), Expired: s.expired.Load()}
}

func reply(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	io.WriteString(w, msg+"\n")
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != s.path {
		reply(w, http.StatusNotFound, fmt.Sprintf("no such path %q: the metadata path is %s", r.URL.Path, s.path))
		return
	}
	q := r.URL.Query()
	key, ok := q["key"]
	if !ok || len(key) != 1 || key[0] == "" {
		reply(w, http.StatusBadRequest, "want exactly one non-empty key query parameter: "+s.path+"?key=<url-escaped key>")
		return
	}
	k := key[0]
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		s.gets.Add(1)
		v, ok := s.get(k)
		if !ok {
			reply(w, http.StatusNotFound, "metadata not found")
			return
		}
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		w.Header().Set("Content-Length", fmt.Sprint(len(v)))
		w.WriteHeader(http.StatusOK)
		if r.Method == http.MethodGet {
			w.Write(v)
		}
	case http.MethodPut:
		ttl := s.ttl
		if h := r.Header.Get(TTLHeader); h != "" {
			d, err := time.ParseDuration(h)
			if err != nil || d <= 0 || d > s.maxTTL {
				reply(w, http.StatusBadRequest, fmt.Sprintf("%s %q: want a positive duration like 10s, at most %v (this server's --max-ttl)", TTLHeader, h, s.maxTTL))
				return
			}
			ttl = d
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.maxBody))
		var tooLarge *http.MaxBytesError
		switch {
		case errors.As(err, &tooLarge):
			reply(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body larger than %d bytes", s.maxBody))
			return
		case err != nil:
			reply(w, http.StatusBadRequest, "invalid request: reading the body: "+err.Error())
			return
		case !json.Valid(body):
			reply(w, http.StatusBadRequest, "invalid request: the body is not JSON")
			return
		}
		if held, ok := s.put(k, body, ttl); !ok {
			reply(w, http.StatusInsufficientStorage, fmt.Sprintf("the server holds %d of its %d bytes (--max-bytes): %d more do not fit", held, s.maxBytes, len(k)+len(body)))
			return
		}
		s.puts.Add(1)
		reply(w, http.StatusOK, "metadata updated")
	case http.MethodDelete:
		s.deletes.Add(1)
		s.del(k)
		reply(w, http.StatusOK, "metadata deleted")
	default:
		w.Header().Set("Allow", "GET, PUT, DELETE")
		reply(w, http.StatusMethodNotAllowed, "method "+r.Method+" not allowed: GET, PUT or DELETE")
	}
}

func (s *Server) get(key string) ([]byte, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.sweepLocked(now)
	e, ok := s.entries[key]
	if !ok {
		return nil, false
	}
	if !e.expires.IsZero() && !now.Before(e.expires) {
		s.dropLocked(key)
		s.expired.Add(1)
		return nil, false
	}
	return e.value, true // never modified in place: a PUT stores a new slice
}

// put stores value under key, unless that would take the server past
// maxBytes: then it says false and what the server holds.
func (s *Server) put(key string, value []byte, ttl time.Duration) (held int64, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.sweepLocked(now)
	held = s.held
	if old, ok := s.entries[key]; ok {
		held -= int64(len(key) + len(old.value))
	}
	if held+int64(len(key)+len(value)) > s.maxBytes {
		return s.held, false
	}
	e := serverEntry{value: value}
	if ttl > 0 {
		e.expires = now.Add(ttl)
	}
	s.entries[key] = e
	s.held = held + int64(len(key)+len(value))
	return s.held, true
}

func (s *Server) del(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweepLocked(s.now())
	s.dropLocked(key)
}

// dropLocked removes key, if held.
func (s *Server) dropLocked(key string) {
	if old, ok := s.entries[key]; ok {
		s.held -= int64(len(key) + len(old.value))
		delete(s.entries, key)
	}
}

// sweepLocked drops expired entries, at most once a second.
func (s *Server) sweepLocked(now time.Time) {
	if now.Sub(s.lastSweep) < time.Second {
		return
	}
	s.lastSweep = now
	for k, e := range s.entries {
		if !e.expires.IsZero() && !now.Before(e.expires) {
			s.dropLocked(k)
			s.expired.Add(1)
		}
	}
}
