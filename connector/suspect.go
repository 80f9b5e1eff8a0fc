package connector

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"
)

// A peer that stopped answering (a hung or SIGSTOPped process, a host
// behind a dead link) makes every batch to it wait its whole timeout.
// After one batch timed out on the node's own bounds (transfer_timeout,
// or the transport's op_timeout), the peer is suspect: later batches fail
// at once, with the reason, until a probe (a handshake Probe, which
// Mooncake nodes answer too) shows that it answers again, every
// peerProbeInterval. A batch bounded by the caller's own deadline does not
// make a peer suspect: the caller may simply have been in a hurry.

// Probing a suspect peer.
const (
	peerProbeInterval = time.Second
	peerProbeTimeout  = time.Second
)

// suspectState is a peer's suspicion, guarded by Peer.mu.
type suspectState struct {
	since  time.Time
	reason error
}

// suspectErr is the error a batch to a suspect peer fails with, or nil.
func (p *Peer) suspectErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.suspect == nil {
		return nil
	}
	p.c.observe().PeerFastFail()
	return fmt.Errorf("connector: peer %s is suspect since %s (%v ago): %v; failing batches to it fast until it answers a probe (every %v): %w",
		p.session, p.suspect.since.Format(time.RFC3339), time.Since(p.suspect.since).Round(time.Millisecond), p.suspect.reason,
		peerProbeInterval, ErrPeerUnreachable)
}

// timedOut reports whether a batch's outcome is a timeout of the node's
// own bounds (not the caller's deadline).
func timedOut(caller context.Context, batchErr error, results []OpResult) error {
	if caller.Err() != nil {
		return nil
	}
	if errors.Is(batchErr, ErrTimeout) {
		return batchErr
	}
	for _, r := range results {
		if errors.Is(r.Err, ErrTimeout) {
			return r.Err
		}
	}
	return nil
}

// markSuspect makes the peer suspect and starts its prober, once.
func (p *Peer) markSuspect(cause error) {
	p.mu.Lock()
	if p.suspect != nil || p.closed {
		p.mu.Unlock()
		return
	}
	p.suspect = &suspectState{since: time.Now(), reason: cause}
	p.mu.Unlock()
	p.c.observe().PeerSuspect()
	c := p.c
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.wg.Add(1)
	c.mu.Unlock()
	c.log.Warn("peer did not answer within the timeout; failing batches to it fast until it answers a probe",
		zap.String("peer", p.session), zap.Duration("probe_every", peerProbeInterval), zap.Error(cause))
	go p.probeUntilAnswered()
}

// probeUntilAnswered probes a suspect peer until it answers (then clears
// the suspicion), it is closed, or the node closes.
func (p *Peer) probeUntilAnswered() {
	c := p.c
	defer c.wg.Done()
	tick := time.NewTicker(peerProbeInterval)
	defer tick.Stop()
	for {
		select {
		case <-c.closing:
			return
		case <-tick.C:
		}
		p.mu.Lock()
		closed := p.closed
		p.mu.Unlock()
		if closed {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), peerProbeTimeout)
		f, err := c.request(ctx, p.session, frameProbe, marshal(requestBody{KVConnect: c.mark()}))
		if err == nil {
			f.release()
		}
		cancel()
		if err != nil {
			continue
		}
		p.mu.Lock()
		since := p.suspect.since
		p.suspect = nil
		p.mu.Unlock()
		c.log.Info("suspect peer answers again; batches to it run again", zap.String("peer", p.session), zap.Duration("suspect_for", time.Since(since)))
		return
	}
}
