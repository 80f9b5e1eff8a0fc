// Package simpletcp is a small, complete kvconnect transport written
// against the public SDK only, as a third party would write one: plain
// TCP, one connection per peer, one op at a time. It shows the contract's
// duties (the lifecycle guard, the owner's bounds check with the region
// table, sentinels, options) in a few hundred lines; it is not fast.
package simpletcp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/plugins/regions"
)

// Name is the transport's name: protocol simpletcp, binary
// kvconnect-transport-simpletcp.
const Name = "simpletcp"

// Options is the transport's config subtree (transports.simpletcp).
type Options struct {
	// Port is the data listener's port; 0 picks a free one.
	Port int `json:"port"`
	// DialTimeout bounds connecting to a peer, e.g. "5s".
	DialTimeout string `json:"dial_timeout"`
}

// Transport is the simpletcp transport; New makes one.
type Transport struct {
	guard   plugins.Guard
	log     *zap.Logger
	regions regions.Table
	dial    time.Duration

	mu      sync.Mutex
	ln      net.Listener
	peers   map[plugins.PeerID]*peer
	nextID  plugins.PeerID
	served  map[net.Conn]struct{}
	serveWG sync.WaitGroup
}

var _ plugins.Transport = (*Transport)(nil)

// New returns a transport; it does nothing until Init.
func New() *Transport {
	return &Transport{log: zap.NewNop(), peers: map[plugins.PeerID]*peer{}, served: map[net.Conn]struct{}{}}
}

// Info describes the transport.
func (t *Transport) Info(context.Context) (plugins.Info, error) {
	return plugins.Info{Name: Name, Version: "0.1.0", APIVersion: plugins.APIVersion,
		Capabilities: plugins.CapRead | plugins.CapWrite | plugins.CapAbsoluteAddress}, nil
}

// Init decodes the options and starts the data listener.
func (t *Transport) Init(ctx context.Context, req plugins.InitRequest) (plugins.InitResult, error) {
	if err := t.guard.BeginInit(Name); err != nil {
		return plugins.InitResult{}, err
	}
	res, err := t.init(ctx, req)
	if gerr := t.guard.EndInit(Name, err == nil); gerr != nil {
		t.stop() // Close came while Init ran
		return plugins.InitResult{}, gerr
	}
	return res, err
}

func (t *Transport) init(ctx context.Context, req plugins.InitRequest) (plugins.InitResult, error) {
	opts := Options{DialTimeout: "5s"}
	if err := plugins.DecodeOptions(Name, req.Options, &opts); err != nil {
		return plugins.InitResult{}, &plugins.InitError{Transport: Name, Step: plugins.StepConfigure, Cause: err.Error(), Err: err}
	}
	d, err := time.ParseDuration(opts.DialTimeout)
	if err != nil || d <= 0 {
		err := fmt.Errorf("%s: option transports.%s.dial_timeout = %q: want a positive duration like 5s: %w", Name, Name, opts.DialTimeout, plugins.ErrInvalidArgument)
		return plugins.InitResult{}, &plugins.InitError{Transport: Name, Step: plugins.StepConfigure, Cause: err.Error(), Err: err}
	}
	if req.Logger != nil {
		t.log = req.Logger
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", net.JoinHostPort(req.BindAddress, strconv.Itoa(opts.Port)))
	if err != nil {
		return plugins.InitResult{}, &plugins.InitError{Transport: Name, Step: plugins.StepBind,
			Cause: fmt.Sprintf("cannot listen on port %d: %v", opts.Port, err),
			Hints: []string{"set transports.simpletcp.port to a free port, or 0"},
			Err:   fmt.Errorf("%w: %w", plugins.ErrUnavailable, err)}
	}
	host := req.Hostname
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if host == "" {
		host = "127.0.0.1"
	}
	ep := net.JoinHostPort(host, strconv.Itoa(ln.Addr().(*net.TCPAddr).Port))
	t.mu.Lock()
	t.ln, t.dial = ln, d
	t.mu.Unlock()
	t.serveWG.Add(1)
	go t.accept(ln)
	t.log.Info("simpletcp transport up", zap.String("endpoint", ep))
	return plugins.InitResult{Endpoint: []byte(ep), Summary: "simpletcp " + ep}, nil
}

// RegisterRegion adds r to the region table peers' ops are checked against.
func (t *Transport) RegisterRegion(_ context.Context, r plugins.Region) ([]byte, error) {
	if err := t.guard.Up(Name); err != nil {
		return nil, err
	}
	if err := t.regions.Add(uint64(r.ID), r.Addr, r.Mem); err != nil {
		return nil, fmt.Errorf("%s: %w", Name, err)
	}
	return nil, nil
}

// DeregisterRegion waits for ops on the region, then forgets it.
func (t *Transport) DeregisterRegion(ctx context.Context, id plugins.RegionID) error {
	if err := t.guard.Up(Name); err != nil {
		return err
	}
	if err := t.regions.Remove(ctx, uint64(id)); err != nil {
		return fmt.Errorf("%s: %w", Name, err)
	}
	return nil
}

// Close stops serving and fails ops in flight with ErrClosed.
func (t *Transport) Close(ctx context.Context) error {
	first, _ := t.guard.BeginClose()
	if !first {
		return nil
	}
	t.stop()
	return t.regions.RemoveAll(ctx)
}

// stop closes the listener, every connection, and waits for the serving
// goroutines.
func (t *Transport) stop() {
	t.mu.Lock()
	ln := t.ln
	peers := t.peers
	t.peers = map[plugins.PeerID]*peer{}
	for nc := range t.served {
		nc.Close()
	}
	t.mu.Unlock()
	if ln != nil {
		ln.Close()
	}
	for _, p := range peers {
		p.close(fmt.Errorf("%s: transport closed: %w", Name, plugins.ErrClosed))
	}
	t.serveWG.Wait()
}

// accept serves peers' connections until the listener closes; an accept
// error that is not the close backs off and retries.
func (t *Transport) accept(ln net.Listener) {
	defer t.serveWG.Done()
	for {
		nc, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			t.log.Warn("simpletcp: accept failed; retrying", zap.Error(err))
			time.Sleep(50 * time.Millisecond)
			continue
		}
		t.mu.Lock()
		if t.guard.Closed() {
			t.mu.Unlock()
			nc.Close()
			return
		}
		t.served[nc] = struct{}{}
		t.serveWG.Add(1)
		t.mu.Unlock()
		go t.serve(nc)
	}
}

// serve answers one peer's requests: every op is resolved through the
// region table (the owner's bounds check) before memory is touched.
func (t *Transport) serve(nc net.Conn) {
	defer t.serveWG.Done()
	defer func() {
		nc.Close()
		t.mu.Lock()
		delete(t.served, nc)
		t.mu.Unlock()
	}()
	var hb [headerSize]byte
	for {
		if _, err := io.ReadFull(nc, hb[:]); err != nil {
			return
		}
		h, err := decodeHeader(hb[:])
		if err != nil {
			t.log.Debug("simpletcp: dropping a peer that sent a bad header", zap.Error(err))
			return
		}
		e, mem, err := t.regions.Resolve(h.region, h.offset, h.length)
		status := statusOK
		switch {
		case errors.Is(err, plugins.ErrOutOfBounds):
			status = statusOutOfBounds
		case err != nil:
			status = statusUnknownRegion
		}
		if h.op == plugins.OpWrite {
			if status == statusOK {
				_, err = io.ReadFull(nc, mem)
				e.Release()
			} else {
				_, err = io.CopyN(io.Discard, nc, int64(h.length))
			}
			if err != nil {
				return
			}
			if _, err := nc.Write([]byte{status}); err != nil {
				return
			}
			continue
		}
		out := net.Buffers{[]byte{status}}
		if status == statusOK {
			out = append(out, mem)
		}
		_, err = out.WriteTo(nc)
		if e != nil {
			e.Release()
		}
		if err != nil {
			return
		}
	}
}
