package connector

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/kvconnect/kvconnect/plugins"
)

// OpStatus is an op's state, as Mooncake reports transfer status.
type OpStatus int

const (
	StatusPending   OpStatus = iota // not finished
	StatusCompleted                 // done
	StatusFailed                    // failed; see the op's error
	StatusTimeout                   // did not finish within its timeout
	StatusCanceled                  // canceled by the caller
)

func (s OpStatus) String() string {
	switch s {
	case StatusPending:
		return "PENDING"
	case StatusCompleted:
		return "COMPLETED"
	case StatusFailed:
		return "FAILED"
	case StatusTimeout:
		return "TIMEOUT"
	case StatusCanceled:
		return "CANCELED"
	}
	return fmt.Sprintf("OpStatus(%d)", int(s))
}

// StatusOf classifies an op's error.
func StatusOf(err error) OpStatus {
	switch {
	case err == nil:
		return StatusCompleted
	case errors.Is(err, ErrTimeout):
		return StatusTimeout
	case errors.Is(err, ErrCanceled):
		return StatusCanceled
	}
	return StatusFailed
}

// Batch is a set of ops submitted together. Its ops complete in any order;
// Wait returns when all have. Its methods are safe for concurrent use.
type Batch struct {
	results []OpResult
	done    chan struct{}
	err     error // batch-level error, set before done closes
	start   time.Time
	elapsed time.Duration
}

// Done is closed when every op has completed.
func (b *Batch) Done() <-chan struct{} { return b.done }

// Wait waits for the batch (or ctx) and returns nil if every op completed,
// else a *BatchError (or the batch-level error).
func (b *Batch) Wait(ctx context.Context) error {
	select {
	case <-b.done:
	case <-ctx.Done():
		return fmt.Errorf("connector: waiting for batch: %w", contextError(ctx.Err()))
	}
	return b.Err()
}

// Err is the batch's outcome once Done is closed (nil before).
func (b *Batch) Err() error {
	select {
	case <-b.done:
	default:
		return nil
	}
	var be *BatchError
	for i, r := range b.results {
		if r.Err != nil {
			if be == nil {
				be = &BatchError{Total: len(b.results), First: r.Err, Index: i}
			}
			be.Failed++
		}
	}
	if be != nil {
		return be
	}
	return b.err
}

// Results are the per-op outcomes once Done is closed.
func (b *Batch) Results() []OpResult {
	select {
	case <-b.done:
		return b.results
	default:
		return nil
	}
}

// Status is op i's state.
func (b *Batch) Status(i int) OpStatus {
	select {
	case <-b.done:
		return StatusOf(b.results[i].Err)
	default:
		return StatusPending
	}
}

// Elapsed is how long the batch took (0 until Done).
func (b *Batch) Elapsed() time.Duration {
	select {
	case <-b.done:
		return b.elapsed
	default:
		return 0
	}
}

// Submit starts a batch of ops against peer and returns at once. The batch
// is bounded by ctx, or by transfer_timeout when ctx has no deadline.
// The ops slice must not change until the batch is done.
func (c *Connector) Submit(ctx context.Context, p *Peer, ops []Op) (*Batch, error) {
	b, run, err := c.prepare(ctx, p, ops)
	if err != nil {
		return nil, err
	}
	if run != nil {
		go run()
	}
	return b, nil
}

// Transfer runs ops against peer and waits for them. It runs the batch on
// the calling goroutine: no hand-off to another goroutine and back, which
// is what a single small op mostly costs besides the wire.
func (c *Connector) Transfer(ctx context.Context, p *Peer, ops ...Op) error {
	b, run, err := c.prepare(ctx, p, ops)
	if err != nil {
		return err
	}
	if run != nil {
		run()
	}
	return b.Err()
}

// prepare checks a batch and returns it with the function that runs it
// (nil when there is nothing to run); the caller runs it on a goroutine
// of its choice. From then on the node waits for it on Close.
func (c *Connector) prepare(ctx context.Context, p *Peer, ops []Op) (*Batch, func(), error) {
	if p == nil || p.c != c {
		return nil, nil, fmt.Errorf("connector: Submit: peer is not from this connector: %w", ErrInvalidArgument)
	}
	if len(ops) > plugins.MaxBatchOps {
		return nil, nil, fmt.Errorf("connector: Submit: batch of %d ops exceeds the limit of %d: split it into several batches: %w", len(ops), plugins.MaxBatchOps, ErrInvalidArgument)
	}
	if err := c.usable(); err != nil {
		return nil, nil, err
	}
	if err := p.suspectErr(); err != nil {
		return nil, nil, err
	}
	if err := c.goneErr(p); err != nil {
		return nil, nil, err
	}
	l, err := p.ensure(ctx)
	if err != nil {
		return nil, nil, err
	}
	if err := c.usableOn(l.at); err != nil {
		return nil, nil, err
	}
	b := &Batch{results: make([]OpResult, len(ops)), done: make(chan struct{}), start: time.Now()}
	if len(ops) == 0 {
		close(b.done)
		return b, nil, nil
	}
	if l.at.info.Capabilities&plugins.CapAbsoluteAddress == 0 {
		// Translate absolute remote addresses with the peer's descriptor.
		ops = append([]Op(nil), ops...)
		for i := range ops {
			if ops[i].RemoteRegion == 0 {
				buf, _, _, err := l.buffers.Resolve(0, ops[i].RemoteOffset, ops[i].Length)
				if err != nil {
					return nil, nil, fmt.Errorf("connector: op %d: remote range [0x%x, +%d) of %s: %w", i, ops[i].RemoteOffset, ops[i].Length, l.desc.Name, err)
				}
				ops[i].RemoteRegion, ops[i].RemoteOffset = RegionID(buf.ID), ops[i].RemoteOffset-buf.Addr
			}
		}
	}
	// Add to the wait group under mu, so Close (which sets closed under mu
	// before it waits) never races a new batch.
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, nil, fmt.Errorf("connector: %w", ErrClosed)
	}
	c.wg.Add(1)
	c.mu.Unlock()
	caller := ctx
	ctx, cancel := c.withTimeout(ctx, c.cfg.TransferTimeout)
	c.observe().BatchStarted(l.at.name, p.session, len(ops))
	run := func() {
		defer c.wg.Done()
		defer cancel()
		err := l.at.tr.Transfer(ctx, l.id, ops, b.results)
		explainRemoteMiss(l, p.session, ops, b.results)
		if err != nil {
			b.err = fmt.Errorf("connector: batch of %d ops to %s: %w", len(ops), p.session, err)
		}
		if cause := lostPeer(err, b.results); cause != nil {
			p.markStale(l.at, l.id, cause)
		}
		if cause := timedOut(caller, err, b.results); cause != nil {
			p.markSuspect(cause)
		}
		b.elapsed = time.Since(b.start)
		c.observe().BatchDone(l.at.name, p.session, ops, b.results, b.elapsed)
		close(b.done)
	}
	return b, run, nil
}

// TransferSyncWrite writes length bytes from local address localAddr to
// the peer's address remoteAddr, as Mooncake's transfer_sync_write does.
// The peer is opened (and cached) on first use.
func (c *Connector) TransferSyncWrite(ctx context.Context, session string, localAddr, remoteAddr, length uint64) error {
	return c.BatchTransferSync(ctx, OpWrite, session, []uint64{localAddr}, []uint64{remoteAddr}, []uint64{length})
}

// TransferSyncRead reads length bytes from the peer's remoteAddr into
// local address localAddr.
func (c *Connector) TransferSyncRead(ctx context.Context, session string, localAddr, remoteAddr, length uint64) error {
	return c.BatchTransferSync(ctx, OpRead, session, []uint64{localAddr}, []uint64{remoteAddr}, []uint64{length})
}

// BatchTransferSync runs one op per (local, remote, length) triple, all
// of kind, as Mooncake's batch_transfer_sync_write/read do.
func (c *Connector) BatchTransferSync(ctx context.Context, kind OpKind, session string, localAddrs, remoteAddrs, lengths []uint64) error {
	p, ops, err := c.addrOps(ctx, kind, session, localAddrs, remoteAddrs, lengths)
	if err != nil {
		return err
	}
	return c.Transfer(ctx, p, ops...)
}

// SubmitAddrs starts a batch of one op per (local, remote, length)
// triple, all of kind, by absolute addresses as Mooncake's
// batch_transfer_async_write/read take them, and returns at once (the
// peer is opened, and cached, first). Local addresses must lie in
// registered regions; remote ones are the peer's addresses. The batch is
// bounded by ctx, or by transfer_timeout when ctx has no deadline.
func (c *Connector) SubmitAddrs(ctx context.Context, kind OpKind, session string, localAddrs, remoteAddrs, lengths []uint64) (*Batch, error) {
	p, ops, err := c.addrOps(ctx, kind, session, localAddrs, remoteAddrs, lengths)
	if err != nil {
		return nil, err
	}
	return c.Submit(ctx, p, ops)
}

// addrOps turns Mooncake-style triples into ops and opens (or finds) the
// peer.
func (c *Connector) addrOps(ctx context.Context, kind OpKind, session string, localAddrs, remoteAddrs, lengths []uint64) (*Peer, []Op, error) {
	if len(localAddrs) != len(remoteAddrs) || len(localAddrs) != len(lengths) {
		return nil, nil, fmt.Errorf("connector: %d local addresses, %d remote addresses and %d lengths: the lists must be the same length: %w",
			len(localAddrs), len(remoteAddrs), len(lengths), ErrInvalidArgument)
	}
	if kind != OpRead && kind != OpWrite {
		return nil, nil, fmt.Errorf("connector: op kind %d: must be OpRead (0) or OpWrite (1): %w", kind, ErrInvalidArgument)
	}
	if err := c.usable(); err != nil { // closed: say so, not "region being freed"
		return nil, nil, err
	}
	ops := make([]Op, len(localAddrs))
	for i := range ops {
		if lengths[i] == 0 {
			return nil, nil, fmt.Errorf("connector: op %d: length 0: %w", i, ErrInvalidArgument)
		}
		r, err := c.regionAt(localAddrs[i], lengths[i])
		if err != nil {
			return nil, nil, fmt.Errorf("connector: op %d: %w", i, err)
		}
		ops[i] = Op{Kind: kind, LocalRegion: r.id, LocalOffset: localAddrs[i] - r.addr, RemoteOffset: remoteAddrs[i], Length: lengths[i]}
	}
	p, err := c.Open(ctx, session)
	if err != nil {
		return nil, nil, err
	}
	return p, ops, nil
}

// Probe asks a peer's node whether it is alive (Mooncake's send_probe,
// over the handshake port): nil when it answers within ctx.
func (c *Connector) Probe(ctx context.Context, session string) error {
	if err := c.usable(); err != nil {
		return err
	}
	if err := c.validSession(session); err != nil {
		return err
	}
	ctx, cancel := c.withTimeout(ctx, c.cfg.ConnectTimeout)
	defer cancel()
	f, err := c.request(ctx, session, frameProbe, marshal(requestBody{KVConnect: c.mark()}))
	if err != nil {
		return fmt.Errorf("connector: probe %s: %w", session, err)
	}
	f.release() // the answer's share of max_handshake_memory
	return nil
}

// explainRemoteMiss adds to an op that failed as an unknown region, at an
// address the peer's descriptor does not hold, why that may be: this node
// learned the peer's regions when it connected to it.
func explainRemoteMiss(l link, session string, ops []Op, results []OpResult) {
	for i := range results {
		if results[i].Err == nil || ops[i].RemoteRegion != 0 || !errors.Is(results[i].Err, ErrUnknownRegion) {
			continue
		}
		if _, _, _, err := l.buffers.Resolve(0, ops[i].RemoteOffset, ops[i].Length); err == nil {
			continue
		}
		results[i].Err = fmt.Errorf("%w (this node knows peer %s's regions from its descriptor, fetched when it connected: "+
			"a region the peer registered since is reached over tcp, which the peer checks, but not over transports that "+
			"address regions by the keys in the descriptor (ucx, rdma, efa) until this node reconnects to the peer)", results[i].Err, session)
	}
}
