package connector

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/kvconnect/kvconnect/config"
	"github.com/kvconnect/kvconnect/units"
)

// frameBudget bounds the memory a node holds for handshake frames being
// received (max_handshake_memory), whatever the number of peers. A frame
// takes its memory as its bytes arrive, frameChunk at a time, never
// because a peer announced a length, and gives it back once it has been
// handled. Three classes share the limit:
//
//   - small requests on the RPC port (up to config.HandshakeSmallFrame)
//     take from config.HandshakeSmallReserve, which holds one for each of
//     the at most maxHandshakeConns connections the port keeps: a real
//     peer's request always fits at once, whatever else arrives;
//   - larger requests may hold half of the rest (the pool);
//   - replies to the node's own handshakes may hold all of the pool that
//     requests leave, so a flood of requests never takes more than half
//     of what the node's own Opens and probes can use.
//
// A frame that does not fit waits, first come first served within its
// class, for as long as its context allows, then is refused
// (ErrResourceExhausted). It is safe for concurrent use.
type frameBudget struct {
	limit int64 // max_handshake_memory
	small int64 // kept for small requests
	pool  int64 // limit - small: large requests (up to pool/2) and replies

	mu      sync.Mutex
	used    [numFrameClasses]int64
	peak    int64
	waiters [numFrameClasses][]*frameWaiter
	refused uint64

	onWait func(frameClass) // tests: called (under mu) when a frame starts waiting
}

// frameClass is what a frame is, for the budget.
type frameClass int

const (
	classSmallRequest frameClass = iota // a request of up to config.HandshakeSmallFrame
	classRequest                        // a larger request on the RPC port
	classReply                          // a reply to this node's own handshake
	numFrameClasses
)

func (c frameClass) String() string {
	switch c {
	case classSmallRequest, classRequest:
		return "request"
	}
	return "reply"
}

// frameChunk is how much of a frame's memory is taken at a time.
const frameChunk = 64 << 10

// The small requests' reserve holds one for each connection the RPC port
// keeps at once.
var _ = [1]struct{}{}[config.HandshakeSmallReserve-maxHandshakeConns*config.HandshakeSmallFrame]

type frameWaiter struct {
	n       int64
	ready   chan struct{}
	granted bool // under mu
}

func newFrameBudget(limit int) *frameBudget {
	small := int64(config.HandshakeSmallReserve)
	if int64(limit) < 2*small {
		small = int64(limit) / 2 // a Config built in code that skipped Validate: still two classes
	}
	return &frameBudget{limit: int64(limit), small: small, pool: int64(limit) - small}
}

// capOf is the most a class may hold.
func (b *frameBudget) capOf(c frameClass) int64 {
	switch c {
	case classSmallRequest:
		return b.small
	case classRequest:
		return b.pool / 2
	}
	return b.pool
}

func (b *frameBudget) fitsLocked(c frameClass, n int64) bool {
	switch c {
	case classSmallRequest:
		return b.used[c]+n <= b.small
	case classRequest:
		return b.used[c]+n <= b.pool/2 && b.used[classRequest]+b.used[classReply]+n <= b.pool
	}
	return b.used[classRequest]+b.used[classReply]+n <= b.pool
}

func (b *frameBudget) takeLocked(c frameClass, n int64) {
	b.used[c] += n
	if t := b.used[0] + b.used[1] + b.used[2]; t > b.peak {
		b.peak = t
	}
}

// tryAcquire takes n bytes for class c if they fit now and nobody of the
// class waits.
func (b *frameBudget) tryAcquire(c frameClass, n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.waiters[c]) > 0 || !b.fitsLocked(c, n) {
		return false
	}
	b.takeLocked(c, n)
	return true
}

// acquire takes n bytes for class c, waiting behind the class's earlier
// waiters until they fit or ctx ends. It fails at once when n can never
// fit.
func (b *frameBudget) acquire(ctx context.Context, c frameClass, n int64) error {
	if n > b.capOf(c) {
		b.refuse()
		return fmt.Errorf("%d bytes can never fit: a %s may hold at most %s of max_handshake_memory %s: %w",
			n, c, units.FormatSize(uint64(b.capOf(c))), units.FormatSize(uint64(b.limit)), ErrResourceExhausted)
	}
	b.mu.Lock()
	if len(b.waiters[c]) == 0 && b.fitsLocked(c, n) {
		b.takeLocked(c, n)
		b.mu.Unlock()
		return nil
	}
	w := &frameWaiter{n: n, ready: make(chan struct{})}
	b.waiters[c] = append(b.waiters[c], w)
	if b.onWait != nil {
		b.onWait(c)
	}
	b.mu.Unlock()
	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
	}
	b.mu.Lock()
	if w.granted {
		b.mu.Unlock()
		return nil
	}
	for i, o := range b.waiters[c] {
		if o == w {
			b.waiters[c] = append(b.waiters[c][:i:i], b.waiters[c][i+1:]...)
			break
		}
	}
	b.grantLocked() // those behind it may fit
	b.refused++
	held := b.used[0] + b.used[1] + b.used[2]
	b.mu.Unlock()
	return fmt.Errorf("no room for %d more bytes before its deadline (%v): handshake frames being received hold %s of max_handshake_memory %s (a %s may hold %s): %w",
		n, ctx.Err(), units.FormatSize(uint64(held)), units.FormatSize(uint64(b.limit)), c, units.FormatSize(uint64(b.capOf(c))),
		ErrResourceExhausted)
}

func (b *frameBudget) refuse() {
	b.mu.Lock()
	b.refused++
	b.mu.Unlock()
}

// release gives back n bytes of class c.
func (b *frameBudget) release(c frameClass, n int64) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	b.used[c] -= n
	b.grantLocked()
	b.mu.Unlock()
}

// grantLocked wakes the waiters that fit now, in order within each class;
// replies first, as the node's own handshakes.
func (b *frameBudget) grantLocked() {
	for _, c := range []frameClass{classReply, classRequest} {
		for len(b.waiters[c]) > 0 {
			w := b.waiters[c][0]
			if !b.fitsLocked(c, w.n) {
				break
			}
			b.takeLocked(c, w.n)
			w.granted = true
			close(w.ready)
			b.waiters[c][0] = nil
			b.waiters[c] = b.waiters[c][1:]
		}
	}
}

// HandshakeMemory is what a node holds for handshake frames being
// received (max_handshake_memory), in Status.
type HandshakeMemory struct {
	Limit   int64  `json:"limit"`    // max_handshake_memory
	InUse   int64  `json:"in_use"`   // held now
	Peak    int64  `json:"peak"`     // the most held at once since start
	Waiting int    `json:"waiting"`  // frames waiting for room now
	Refused uint64 `json:"refused"`  // frames refused because they did not fit in time
	Reserve int64  `json:"reserved"` // kept for requests of up to 4 KiB
}

func (b *frameBudget) status() HandshakeMemory {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := HandshakeMemory{Limit: b.limit, InUse: b.used[0] + b.used[1] + b.used[2], Peak: b.peak, Refused: b.refused, Reserve: b.small}
	for _, ws := range b.waiters {
		s.Waiting += len(ws)
	}
	return s
}

// chunkPool recycles the frameChunk buffers large frames arrive in, so a
// flood of partial frames reuses the same memory.
var chunkPool = sync.Pool{New: func() any { return new([frameChunk]byte) }}

// received is one frame read against the budget. Its body is the
// frame's memory until release.
type received struct {
	typ   byte
	body  []byte
	b     *frameBudget
	class frameClass
	held  int64
}

// release gives the frame's memory back to the budget. The body must not
// be used after.
func (f *received) release() {
	if f.b != nil {
		f.b.release(f.class, f.held)
		f.held = 0
	}
}

// readFrame reads one frame of at most max bytes (type + body) from r,
// taking its memory from the budget as its bytes arrive: requests (on
// the RPC port) when request is true, else a reply to this node's own
// handshake. Waiting for room is bounded by ctx. The caller must release
// the frame.
func (b *frameBudget) readFrame(ctx context.Context, r io.Reader, max int, request bool) (*received, error) {
	var hdr [9]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n, err := decodeFrameHeader(hdr[:], max)
	if err != nil {
		return nil, err
	}
	f := &received{typ: hdr[8], b: b, class: classReply}
	if request {
		f.class = classRequest
		if n+1 <= config.HandshakeSmallFrame && b.tryAcquire(classSmallRequest, int64(n)) {
			f.class, f.held = classSmallRequest, int64(n)
			f.body = make([]byte, n)
			if _, err := io.ReadFull(r, f.body); err != nil {
				f.release()
				return nil, unexpectedEOF(err)
			}
			return f, nil
		}
	}
	if err := f.readChunks(ctx, r, n); err != nil {
		f.release()
		return nil, err
	}
	return f, nil
}

// readChunks reads an n-byte body frameChunk at a time, taking each
// chunk's memory before reading it.
func (f *received) readChunks(ctx context.Context, r io.Reader, n int) error {
	if n <= frameChunk {
		if err := f.b.acquire(ctx, f.class, int64(n)); err != nil {
			return fmt.Errorf("connector: handshake %s of %d bytes: %w", f.class, n, err)
		}
		f.held = int64(n)
		f.body = make([]byte, n)
		_, err := io.ReadFull(r, f.body)
		return unexpectedEOF(err)
	}
	var chunks []*[frameChunk]byte
	defer func() {
		for _, c := range chunks {
			chunkPool.Put(c)
		}
	}()
	for got := 0; got < n; {
		k := min(frameChunk, n-got)
		if err := f.b.acquire(ctx, f.class, frameChunk); err != nil {
			return fmt.Errorf("connector: handshake %s of %d bytes (%d received): %w", f.class, n, got, err)
		}
		f.held += frameChunk
		c := chunkPool.Get().(*[frameChunk]byte)
		chunks = append(chunks, c)
		if _, err := io.ReadFull(r, c[:k]); err != nil {
			return unexpectedEOF(err)
		}
		got += k
	}
	// The whole frame is here: one contiguous body, held under the
	// chunks' memory (at least n); the chunks go back to the pool.
	f.body = make([]byte, n)
	for i, c := range chunks {
		copy(f.body[i*frameChunk:], c[:])
	}
	return nil
}

func unexpectedEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// requestContext bounds waiting for room for a request on a connection
// accepted at start: the request's own handshakeTimeout.
func requestContext(start time.Time) (context.Context, context.CancelFunc) {
	return context.WithDeadline(context.Background(), start.Add(handshakeTimeout))
}
