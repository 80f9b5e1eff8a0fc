package soak

import (
	"context"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvconnect/kvconnect/connector"
	"github.com/kvconnect/kvconnect/errdefs"
)

// Sizes of the workload.
const (
	blockSize     = 64 << 10
	blocksPerOp   = 8  // ops per batch
	sliceBlocks   = 64 // each worker's share of a target's region
	workersPerTgt = 2
)

// counters are the workload's totals, updated by every worker.
type counters struct {
	bytes     atomic.Uint64
	verified  atomic.Uint64
	corrupted atomic.Uint64
	okOps     atomic.Uint64
	discarded atomic.Uint64 // cycles that spanned a target restart

	mu       sync.Mutex
	failed   map[string]uint64 // ops failed, by errdefs kind
	examples map[string]string // one error text per kind
	corrupt  []string          // what the corrupted blocks were
}

func (c *counters) fail(err error, n int) {
	kind := errdefs.Kind(err)
	if kind == "" {
		kind = "other"
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.failed[kind] += uint64(n)
	if _, ok := c.examples[kind]; !ok {
		c.examples[kind] = err.Error()
	}
}

// worker moves blocks to one slice of a target's first region and reads
// them back, without pause, until ctx ends.
type worker struct {
	id    int
	node  *connector.Connector
	tgt   *target
	slice uint64 // offset of its slice in the target's region 1
	src   *connector.Region
	back  *connector.Region
	c     *counters
	rng   *rand.Rand
	gen   uint64
	// cycleDone is signalled after every verified cycle.
	cycleDone func()
}

// fill writes the pattern of (worker, block, generation) into b.
func fill(b []byte, worker int, block int, gen uint64) {
	seed := uint64(worker)<<48 ^ uint64(block)<<32 ^ gen
	r := rand.New(rand.NewPCG(seed, seed*0x9e3779b97f4a7c15))
	for i := 0; i+8 <= len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], r.Uint64())
	}
}

func (w *worker) run(ctx context.Context) {
	var peer *connector.Peer
	for ctx.Err() == nil {
		if peer == nil {
			octx, cancel := context.WithTimeout(ctx, 5*time.Second)
			p, err := w.node.Open(octx, w.tgt.session)
			cancel()
			if err != nil {
				if ctx.Err() == nil {
					w.c.fail(err, 1)
					sleep(ctx, 100*time.Millisecond)
				}
				continue
			}
			peer = p
		}
		if err := w.cycle(ctx, peer); errors.Is(err, connector.ErrClosed) {
			peer = nil
		}
	}
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// cycle writes blocksPerOp random blocks of the slice, reads them back,
// and checks them.
func (w *worker) cycle(ctx context.Context, peer *connector.Peer) error {
	epoch := w.tgt.epoch.Load()
	w.gen++
	blocks := w.rng.Perm(sliceBlocks)[:blocksPerOp]
	writes := make([]connector.Op, blocksPerOp)
	reads := make([]connector.Op, blocksPerOp)
	src, back := w.src.Bytes(), w.back.Bytes()
	for i, blk := range blocks {
		fill(src[i*blockSize:(i+1)*blockSize], w.id, blk, w.gen)
		clear(back[i*blockSize : (i+1)*blockSize])
		remote := w.slice + uint64(blk)*blockSize
		writes[i] = connector.Op{Kind: connector.OpWrite, LocalRegion: w.src.ID(), LocalOffset: uint64(i * blockSize), RemoteRegion: 1, RemoteOffset: remote, Length: blockSize}
		reads[i] = connector.Op{Kind: connector.OpRead, LocalRegion: w.back.ID(), LocalOffset: uint64(i * blockSize), RemoteRegion: 1, RemoteOffset: remote, Length: blockSize}
	}
	if err := w.batch(ctx, peer, writes); err != nil {
		return err
	}
	if err := w.batch(ctx, peer, reads); err != nil {
		return err
	}
	if e := w.tgt.epoch.Load(); e != epoch || e%2 == 1 {
		w.c.discarded.Add(1) // the target restarted meanwhile: its memory is new
		return nil
	}
	for i, blk := range blocks {
		got := back[i*blockSize : (i+1)*blockSize]
		want := src[i*blockSize : (i+1)*blockSize]
		if string(got) != string(want) {
			w.c.corrupted.Add(1)
			w.c.mu.Lock()
			if len(w.c.corrupt) < 16 {
				w.c.corrupt = append(w.c.corrupt, describe(w.tgt.name, w.id, blk, got, want))
			}
			w.c.mu.Unlock()
			continue
		}
		w.c.verified.Add(1)
	}
	w.tgt.verified.Add(blocksPerOp)
	if w.cycleDone != nil {
		w.cycleDone()
	}
	return nil
}

// batch runs ops and counts their outcome; it returns an error if any op
// failed.
func (w *worker) batch(ctx context.Context, peer *connector.Peer, ops []connector.Op) error {
	b, err := w.node.Submit(ctx, peer, ops)
	if err != nil {
		if ctx.Err() == nil {
			w.c.fail(err, len(ops))
			sleep(ctx, 20*time.Millisecond) // a suspect peer fails at once: do not spin
		}
		return err
	}
	b.Wait(context.Background())
	var first error
	for _, r := range b.Results() {
		if r.Err != nil {
			if ctx.Err() == nil {
				w.c.fail(r.Err, 1)
			}
			first = errors.Join(first, r.Err)
			continue
		}
		w.c.okOps.Add(1)
		w.c.bytes.Add(blockSize)
	}
	return first
}

func describe(tgt string, worker, block int, got, want []byte) string {
	first := -1
	for i := range got {
		if got[i] != want[i] {
			first = i
			break
		}
	}
	return "target " + tgt + " worker " + itoa(worker) + " block " + itoa(block) + ": first differing byte " + itoa(first)
}

func itoa(i int) string { return strconv.Itoa(i) }
