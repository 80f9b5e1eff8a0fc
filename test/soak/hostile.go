package soak

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/kvconnect/kvconnect/auth"
	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/transports/tcp"
)

// hostileStats counts hostile connections by what they did.
type hostileStats struct {
	mu     sync.Mutex
	byKind map[string]int
	// landed counts hostile writes a node accepted: with auth on it must
	// stay 0.
	landed atomic.Uint64
}

func (h *hostileStats) add(kind string) {
	h.mu.Lock()
	h.byKind[kind]++
	h.mu.Unlock()
}

// ports are every listening port of the run: RPC and data, of every node.
func (r *run) ports() []string {
	out := []string{r.node.SessionID()}
	for _, ts := range r.node.Status().Transports {
		if ts.Name == "tcp" {
			out = append(out, ts.Summary[len("tcp "):])
		}
	}
	for _, t := range r.targets {
		t.mu.Lock()
		if t.session != "" {
			out = append(out, t.session, t.data)
		}
		t.mu.Unlock()
	}
	return out
}

// hostile opens a burst of hostile connections at once and waits for them
// to end (about 2 s).
func (r *run) hostile(ctx context.Context, rng *mrand.Rand) error {
	ports := r.ports()
	var wg sync.WaitGroup
	for i := 0; i < 40; i++ {
		addr := ports[rng.IntN(len(ports))]
		kind := rng.IntN(5)
		wg.Add(1)
		go func() {
			defer wg.Done()
			hostileConn(ctx, addr, kind, r.hostileStats)
		}()
	}
	var err error
	if r.keys != nil {
		err = r.attackerWrites(ctx, rng)
	}
	wg.Wait()
	return err
}

func hostileConn(ctx context.Context, addr string, kind int, st *hostileStats) {
	d := net.Dialer{Timeout: 2 * time.Second}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		st.add("dial failed")
		return
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(3 * time.Second))
	switch kind {
	case 0: // random bytes
		b := make([]byte, 1+mrand.IntN(4096))
		rand.Read(b)
		nc.Write(b)
		st.add("garbage")
	case 1: // idle
		sleep(ctx, 2*time.Second)
		st.add("idle")
	case 2: // slow drip of a frame header claiming a large body
		for i := 0; i < 20 && ctx.Err() == nil; i++ {
			if _, err := nc.Write([]byte{0xff}); err != nil {
				break
			}
			sleep(ctx, 100*time.Millisecond)
		}
		st.add("slow drip")
	case 3: // an auth hello with a key nobody holds
		h := auth.Hello{Version: auth.Version}
		rand.Read(h.Key[:])
		rand.Read(h.Nonce[:])
		nc.Write(h.Encode())
		b := make([]byte, auth.ChallengeSize)
		nc.Read(b)
		st.add("wrong key")
	case 4: // a kvconnect data frame magic, then garbage
		b := make([]byte, 512)
		rand.Read(b)
		copy(b, "KVCN")
		nc.Write(b)
		st.add("forged frames")
	}
}

// attackerWrites runs a tcp transport without the secret that writes to
// every target's region, knowing its address: every write must be
// refused.
func (r *run) attackerWrites(ctx context.Context, rng *mrand.Rand) error {
	tr := tcp.New()
	if _, err := tr.Init(ctx, plugins.InitRequest{Hostname: "127.0.0.1"}); err != nil {
		return err
	}
	defer tr.Close(context.Background())
	payload := make([]byte, blockSize)
	rand.Read(payload)
	if _, err := tr.RegisterRegion(ctx, plugins.Region{ID: 1, Addr: uint64(uintptr(unsafe.Pointer(&payload[0]))), Mem: payload}); err != nil {
		return err
	}
	var errs []error
	for _, t := range r.targets {
		t.mu.Lock()
		data, session := t.data, t.session
		t.mu.Unlock()
		peer, err := r.node.Open(ctx, session)
		if err != nil || data == "" {
			continue // the target is down: nothing to attack
		}
		regs := peer.Regions()
		if len(regs) == 0 {
			continue
		}
		addr := regs[0].Addr + uint64(rng.IntN(int(regs[0].Len/blockSize)))*blockSize
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		id, err := tr.Connect(cctx, plugins.PeerInfo{Name: t.name, Endpoint: []byte(data)})
		if err == nil {
			res := make([]plugins.OpResult, 1)
			err = tr.Transfer(cctx, id, []plugins.Op{{Kind: plugins.OpWrite, LocalRegion: 1, RemoteOffset: addr, Length: blockSize}}, res)
			if err == nil && res[0].Err == nil {
				r.hostileStats.landed.Add(1)
				errs = append(errs, fmt.Errorf("soak: a write without the secret landed on %s", t.name))
			}
			tr.Disconnect(context.Background(), id)
		}
		cancel()
		r.hostileStats.add("unauthenticated writes")
	}
	return errors.Join(errs...)
}
