package efa

import (
	"time"
	"unsafe"

	"github.com/kvconnect/kvconnect/plugins/regions"
)

// chunk is one RMA operation: all or part of an op.
type chunk struct {
	op    int32
	write bool
	done  bool    // finished: completed, failed, or dropped unposted
	laddr uintptr // local address (region memory is mmapped, never Go heap)
	desc  uintptr // fi_mr_desc of the local region when FI_MR_LOCAL, else 0
	raddr uint64  // remote RMA address
	rkey  uint64
	n     uint64
	rr    *remoteRegion
}

// opState tracks one op of a batch on the progress thread.
type opState struct {
	entry *regions.Entry // the local region, held until every chunk is finished
	rr    *remoteRegion
	left  int32 // chunks not finished
	// reported is set once the op's result is final. Chunks of a reported
	// op may still be posted (an op timed out, was canceled, or its region
	// turned out to be gone): the entry is held until the provider gives
	// them back, and its unposted chunks are never posted.
	reported bool
	pre      bool // reported before the batch was submitted (validation)
	err      error
}

// batch is one Transfer call.
type batch struct {
	conn       *peerConn
	chunks     []chunk
	next       int // first chunk not yet handed to the provider
	ops        []opState
	res        []error // final results, written by the progress thread
	unreported int
	since      time.Time
	lastProbe  time.Time
	gates      int // region checks to pass before the batch posts
	done       chan struct{}
	maxChunk   uint64
}

func newBatch(conn *peerConn, nops int, maxChunk uint64) *batch {
	b := &batch{conn: conn, ops: make([]opState, nops), res: make([]error, nops), unreported: nops,
		done: make(chan struct{}), maxChunk: maxChunk}
	b.chunks = make([]chunk, 0, nops)
	return b
}

// addChunks splits op i over mem into chunks of at most b.maxChunk bytes.
func (b *batch) addChunks(i int32, write bool, mem []byte, desc uintptr, rr *remoteRegion, raddr, rkey uint64) {
	base := uintptr(unsafe.Pointer(unsafe.SliceData(mem)))
	n := uint64(len(mem))
	b.ops[i].rr = rr
	for off := uint64(0); off < n; off += b.maxChunk {
		size := min(b.maxChunk, n-off)
		b.chunks = append(b.chunks, chunk{op: i, write: write, laddr: base + uintptr(off), desc: desc, raddr: raddr + off, rkey: rkey, n: size, rr: rr})
		b.ops[i].left++
	}
}

// report makes op i's result final; the last report closes b.done.
func (b *batch) report(i int32, err error) {
	o := &b.ops[i]
	if o.reported {
		return
	}
	o.reported = true
	b.res[i] = err
	b.unreported--
	if b.unreported == 0 {
		close(b.done)
	}
}

// finishChunk accounts for a chunk the provider is done with (or that
// will never be posted). The op's region is released after its last chunk.
// It is idempotent.
func (b *batch) finishChunk(c *chunk, err error) {
	if c.done {
		return
	}
	c.done = true
	o := &b.ops[c.op]
	o.left--
	if err != nil && o.err == nil {
		o.err = err
	}
	if o.left == 0 {
		if o.entry != nil {
			o.entry.Release()
			o.entry = nil
		}
		b.report(c.op, o.err)
	}
}

// failOp makes op i fail with err now. Its posted chunks stay with the
// provider; its unposted ones are dropped when the poster reaches them.
func (b *batch) failOp(i int32, err error) {
	o := &b.ops[i]
	if o.reported {
		return
	}
	if o.err == nil {
		o.err = err
	}
	b.report(i, err)
}

// failUnreported makes every op not yet final fail with err and drops
// every unposted chunk.
func (b *batch) failUnreported(err error) {
	for i := range b.ops {
		b.failOp(int32(i), err)
	}
	b.dropUnposted()
}

// dropUnposted finishes the chunks not yet posted.
func (b *batch) dropUnposted() {
	for ; b.next < len(b.chunks); b.next++ {
		c := &b.chunks[b.next]
		b.finishChunk(c, b.ops[c.op].err)
	}
}
