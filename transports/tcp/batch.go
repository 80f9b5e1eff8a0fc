package tcp

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/plugins/regions"
	"github.com/kvconnect/kvconnect/transports/tcp/internal/wire"
)

// batch tracks one Transfer call. results belongs to the caller until the
// call returns; completions write into it under mu, and the call returns
// only once every op has completed (done), also when its context ended.
type batch struct {
	mu        sync.Mutex
	results   []plugins.OpResult
	remaining int
	// gaveUp is the context's error once Transfer gave up on the batch:
	// ops that fail after that (taken back, or on a connection reset for
	// them) report it, the reason they failed.
	gaveUp error
	done   chan struct{}
}

// errGivenUp marks the failures Transfer causes when it gives up on a
// batch: its chunks taken back from the queues, and the requests of the
// connections it reset. Other batches' requests on such a connection fail
// with ErrCanceled (retry them), not ErrPeerUnreachable: the peer is
// fine, and a caller that saw it unreachable would drop it.
var errGivenUp = errors.New("the connection was reset because a batch with requests on it was given up (its context ended), so that none of them lands later; retry")

// opState tracks one op split into chunks.
//
// remaining counts what the op still waits for: one answer per chunk
// (its response, or its failure), plus one per WRITE chunk a writer has
// taken and not finished writing (conn.take, conn.write). A peer may
// answer a WRITE before it has read the payload (a buggy or hostile
// one): the op, and with it the hold on its local region, then ends only
// once the payload has left this process, so no byte is read from memory
// its owner was told is free.
type opState struct {
	b         *batch
	idx       int
	entry     *regions.Entry // local region, held until the op completes
	remaining atomic.Int32   // answers and writes the op still waits for
	err       error          // first chunk error; guarded by b.mu
}

// chunk is one frame's worth of an op.
type chunk struct {
	st           *opState
	c            *conn // the connection it was queued on (enqueue)
	op           wire.Op
	local        []byte
	remoteRegion uint64
	remoteOffset uint64
	reqID        uint64
}

// complete records the chunk's answer: its response, or why it failed.
// Each chunk is completed exactly once.
func (ch *chunk) complete(err error) {
	s := ch.st
	if err != nil {
		s.b.mu.Lock()
		if s.err == nil {
			s.err = err
		}
		s.b.mu.Unlock()
	}
	s.settle()
}

// written says a writer that took the chunk (conn.take) reads its memory
// no more.
func (ch *chunk) written() {
	if ch.op == wire.OpWrite {
		ch.st.settle()
	}
}

// settle counts one thing the op waited for as done; the last one
// completes the op.
func (s *opState) settle() {
	if s.remaining.Add(-1) == 0 {
		s.entry.Release()
		b := s.b
		b.mu.Lock()
		err := s.err
		// Failures Transfer caused giving up (chunks taken back, or broken
		// off by the reset of their connection) report why: the context.
		// (A chunk being read when its connection was reset reports the
		// connection's error: conn.brokenBy.)
		if b.gaveUp != nil && errors.Is(err, errGivenUp) {
			err = fmt.Errorf("tcp: op %d: %w", s.idx, b.gaveUp)
		}
		b.results[s.idx].Err = err
		b.remaining--
		if b.remaining == 0 {
			close(b.done)
		}
		b.mu.Unlock()
	}
}

func (ch *chunk) remoteError(peer string, st wire.Status) error {
	var sentinel error
	switch st {
	case wire.StatusOutOfBounds:
		sentinel = plugins.ErrOutOfBounds
	case wire.StatusUnknownRegion:
		sentinel = plugins.ErrUnknownRegion
	case wire.StatusShuttingDown:
		sentinel = plugins.ErrPeerUnreachable
	default:
		sentinel = plugins.ErrInvalidArgument
	}
	where := fmt.Sprintf("region %d offset %d", ch.remoteRegion, ch.remoteOffset)
	if ch.remoteRegion == 0 {
		where = fmt.Sprintf("address 0x%x", ch.remoteOffset)
	}
	return fmt.Errorf("tcp: peer %s refused %s of %d bytes at %s: %s: %w", peer, ch.op, len(ch.local), where, st, sentinel)
}

// Transfer runs ops against a peer: each op is checked against the local
// regions, split into chunks, striped over the peer's connections, and
// completes when all its chunks have been answered.
func (t *Transport) Transfer(ctx context.Context, id plugins.PeerID, ops []plugins.Op, results []plugins.OpResult) error {
	if len(results) != len(ops) {
		err := fmt.Errorf("tcp: %d results for %d ops: %w", len(results), len(ops), plugins.ErrInvalidArgument)
		plugins.FillResults(results, err)
		return err
	}
	t.mu.Lock()
	mp := t.mcpeers[id]
	t.mu.Unlock()
	if mp != nil {
		return mp.transfer(ctx, ops, results)
	}
	p, err := t.peer(id)
	if err != nil {
		plugins.FillResults(results, err)
		return err
	}
	if len(ops) == 0 {
		return nil
	}
	chunkSize := uint64(t.opts.ChunkSize)
	b := &batch{results: results, done: make(chan struct{})}
	states := make([]opState, len(ops))
	total := 0
	for i := range ops {
		op := &ops[i]
		results[i].Err = nil
		if err := checkOp(op); err != nil {
			results[i].Err = err
			continue
		}
		e, _, err := t.regions.Resolve(uint64(op.LocalRegion), op.LocalOffset, op.Length)
		if err != nil {
			if t.guard.Closed() {
				// the regions went away because the transport closed
				err = fmt.Errorf("tcp: transport closed: %w", plugins.ErrClosed)
			}
			results[i].Err = fmt.Errorf("tcp: local side of op %d: %w", i, err)
			continue
		}
		n := int((op.Length + chunkSize - 1) / chunkSize)
		states[i] = opState{b: b, idx: i, entry: e}
		states[i].remaining.Store(int32(n))
		total += n
		b.remaining++
	}
	if b.remaining == 0 {
		return nil
	}
	chunks := make([]chunk, 0, total)
	for i := range ops {
		st := &states[i]
		if st.b == nil {
			continue
		}
		op := &ops[i]
		local := st.entry.Mem
		base := op.LocalOffset
		if op.LocalRegion == 0 {
			base -= st.entry.Addr
		}
		wop := wire.OpWrite
		if op.Kind == plugins.OpRead {
			wop = wire.OpRead
		}
		for off := uint64(0); off < op.Length; off += chunkSize {
			n := min(chunkSize, op.Length-off)
			chunks = append(chunks, chunk{
				st:           st,
				op:           wop,
				local:        local[base+off : base+off+n : base+off+n],
				remoteRegion: uint64(op.RemoteRegion),
				remoteOffset: op.RemoteOffset + off,
			})
		}
	}
	start := int(p.rr.Add(uint32(len(chunks))))
	for k := range chunks {
		t.send(ctx, p, start+k, &chunks[k], len(chunks) == 1 && len(chunks[k].local) <= directWriteMax)
	}
	select {
	case <-b.done:
		return nil
	case <-ctx.Done():
	}
	// Given up. Nothing of the batch may happen once the caller is told it
	// failed: a WRITE landing later would overwrite what the caller wrote
	// there since, a READ's answer would land in memory the caller reuses.
	// So its chunks not sent yet are taken back, the connections holding
	// its requests in flight are reset (the target drops requests from a
	// connection reset before it read them), and the call returns once
	// every op has ended. Ops that completed before keep their outcome.
	cerr := fmt.Errorf("tcp: batch to peer %s: %w", p.name, plugins.ContextError(ctx.Err()))
	b.mu.Lock()
	b.gaveUp = cerr
	b.mu.Unlock()
	giveUp(p, b, chunks)
	<-b.done
	for i := range results {
		if results[i].Err != nil {
			return cerr
		}
	}
	return nil
}

// giveUp takes b's chunks back from the queues of the connections they
// went to, where they are not sent yet, then resets every connection that
// holds a chunk of an op still under way: one sent and not answered, or
// being written or read right now.
func giveUp(p *peer, b *batch, chunks []chunk) {
	seen := map[*conn]bool{}
	for k := range chunks {
		c := chunks[k].c
		if c == nil || seen[c] {
			continue // never queued (send completed it), or done
		}
		seen[c] = true
		for _, ch := range c.takeBack(b) {
			ch.c = nil // not on c any more: no reason to reset it below
			ch.complete(errGivenUp)
		}
	}
	reset := map[*conn]bool{}
	for k := range chunks {
		ch := &chunks[k]
		if ch.c == nil || reset[ch.c] || ch.st.remaining.Load() == 0 {
			continue
		}
		reset[ch.c] = true
		ch.c.fail(fmt.Errorf("tcp: request to peer %s aborted: %w: %w", p.name, errGivenUp, plugins.ErrCanceled))
	}
}

// directWriteMax bounds the chunk a caller writes itself (conn.enqueue):
// small enough to go into an idle socket's buffer at once.
const directWriteMax = 16 << 10

// send queues a chunk on a healthy connection, redialing if needed;
// direct: the batch's only chunk, which the caller may write itself.
func (t *Transport) send(ctx context.Context, p *peer, slot int, ch *chunk, direct bool) {
	var err error
	for attempt := 0; attempt < 3 && ctx.Err() == nil; attempt++ {
		var c *conn
		c, err = p.pick(ctx, slot)
		if err != nil {
			break
		}
		sent := time.Now()
		if ok, selfRead := c.enqueue(ctx, ch, direct); ok {
			if selfRead {
				if testAfterLoneWrite != nil {
					testAfterLoneWrite()
				}
				c.readOwn(ctx, ch, sent)
			}
			return
		}
		err = fmt.Errorf("tcp: connection to peer %s broke: %w", p.name, plugins.ErrPeerUnreachable)
	}
	if err == nil || ctx.Err() != nil {
		// A dial or redial the caller's context cut short says nothing of
		// the peer: report the context's end, not the peer unreachable.
		err = fmt.Errorf("tcp: chunk not sent to peer %s: %w", p.name, plugins.ContextError(ctx.Err()))
	}
	ch.complete(err)
}

func checkOp(op *plugins.Op) error {
	switch {
	case op.Kind != plugins.OpRead && op.Kind != plugins.OpWrite:
		return fmt.Errorf("tcp: op kind %d: must be READ (0) or WRITE (1): %w", op.Kind, plugins.ErrInvalidArgument)
	case op.Length == 0:
		return fmt.Errorf("tcp: op of length 0: %w", plugins.ErrInvalidArgument)
	case op.RemoteOffset+op.Length < op.RemoteOffset:
		return fmt.Errorf("tcp: remote range at %d+%d wraps: %w", op.RemoteOffset, op.Length, plugins.ErrOutOfBounds)
	}
	return nil
}
