package metrics

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
)

// Prober is what the endpoint's health and status pages ask the node.
// Its methods are called from HTTP handlers, concurrently with anything
// the node does; they must be cheap and never block on a plugin.
type Prober interface {
	// Health is nil while the node's preferred transport is up and
	// healthy, else the reason it is not.
	Health() error
	// Ready is nil while the node takes work, else why not.
	Ready() error
	// Status is the node's status, served as JSON.
	Status() any
}

// Endpoint serves a node's observability over HTTP:
//
//	/metrics  the registry in Prometheus' text format
//	/healthz  200 "ok" while Prober.Health is nil, else 503 and the reason
//	/readyz   200 "ready" while Prober.Ready is nil, else 503 and the reason
//	/status   Prober.Status as JSON
//
// Start serves on the listener in a goroutine; Close stops it, waiting for
// requests in flight (bounded by its context), and is idempotent.
type Endpoint struct {
	ln  net.Listener
	srv *http.Server
	log *zap.Logger

	once   sync.Once
	served chan struct{} // closed when Serve returned
	closed bool
	mu     sync.Mutex
}

// Endpoint limits: a slow or idle client cannot hold a connection long.
const (
	endpointReadHeaderTimeout = 5 * time.Second
	endpointWriteTimeout      = 30 * time.Second
	endpointIdleTimeout       = 60 * time.Second
)

// NewEndpoint serves g, p on ln once started. It does nothing until
// Start; log may be nil.
func NewEndpoint(ln net.Listener, g prometheus.Gatherer, p Prober, log *zap.Logger) *Endpoint {
	if log == nil {
		log = zap.NewNop()
	}
	mux := http.NewServeMux()
	// Uncompressed even when the scraper offers gzip: compressing a node's
	// 15–30 KB took a sixth of a scrape's CPU in the node (0.3 of 2.2 ms;
	// docs/DATAPATH-ROUNDS.md, thirty-second round), and a scrape every
	// 15 s sends 2 KB/s either way.
	mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError, ErrorLog: zapErrorLog{log}, DisableCompression: true}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { answer(w, p.Health(), "ok") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) { answer(w, p.Ready(), "ready") })
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, _ *http.Request) {
		b, err := json.MarshalIndent(p.Status(), "", "  ")
		if err != nil {
			http.Error(w, "status: "+err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(append(b, '\n'))
	})
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprint(w, "kvconnect node\n/metrics  Prometheus metrics\n/healthz  200 while the preferred transport is up and healthy\n/readyz   200 while the node takes work\n/status   the node's status (JSON)\n")
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: endpointReadHeaderTimeout, WriteTimeout: endpointWriteTimeout,
		IdleTimeout: endpointIdleTimeout, MaxHeaderBytes: 64 << 10}
	if l, err := zap.NewStdLogAt(log.Named("metrics-http"), zap.WarnLevel); err == nil {
		srv.ErrorLog = l
	}
	return &Endpoint{ln: ln, log: log, served: make(chan struct{}), srv: srv}
}

func answer(w http.ResponseWriter, err error, ok string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, err.Error())
		return
	}
	fmt.Fprintln(w, ok)
}

// Addr is the address the endpoint listens on.
func (e *Endpoint) Addr() net.Addr { return e.ln.Addr() }

// Start serves in a goroutine until Close.
func (e *Endpoint) Start() {
	e.once.Do(func() {
		go func() {
			defer close(e.served)
			if err := e.srv.Serve(e.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				e.log.Error("metrics endpoint stopped", zap.String("address", e.ln.Addr().String()), zap.Error(err))
			}
		}()
	})
}

// Close stops the endpoint: no new connections, requests in flight end
// (or are cut when ctx ends first), the listener is closed. Idempotent.
func (e *Endpoint) Close(ctx context.Context) error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	e.mu.Unlock()
	started := true
	e.once.Do(func() { started = false; close(e.served) })
	if !started {
		return e.ln.Close()
	}
	err := e.srv.Shutdown(ctx)
	if err != nil {
		err = errors.Join(err, e.srv.Close())
	}
	<-e.served
	return err
}

// zapErrorLog is promhttp's error log on zap.
type zapErrorLog struct{ log *zap.Logger }

func (l zapErrorLog) Println(v ...any) { l.log.Warn("metrics: " + fmt.Sprint(v...)) }
