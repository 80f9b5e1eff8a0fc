//go:build linux && cgo

package efa

import (
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/kvconnect/kvconnect/plugins"
)

// handle accounts for what poll returned; it returns how many completions
// it processed.
func (f *fabric) handle(n int, e cqError, slots []uint32) int {
	switch {
	case n > 0:
		for _, s := range slots[:n] {
			f.complete(s, nil)
		}
		return n
	case n == -fiEAVAIL:
		f.complete(e.slot, &e)
		return 1
	case n == -fiEAGAIN || n == 0:
		return 0
	}
	if f.pollErrs < 10 {
		f.pollErrs++
		f.log.Warn("efa: reading the completion queue failed", zap.Int("code", n), zap.String("name", fiName(n)), zap.String("error", fiStrerror(n)))
	}
	return 0
}

// complete finishes what was posted with context slot.
func (f *fabric) complete(slot uint32, e *cqError) {
	if int(slot) >= len(f.slots) || (f.slots[slot].b == nil && f.slots[slot].pr == nil) {
		if e != nil {
			f.log.Warn("efa: completion error for an unknown context", zap.Int("err", e.err), zap.String("text", e.text))
		}
		return
	}
	ref := f.slots[slot]
	f.slots[slot] = slotRef{}
	f.free = append(f.free, slot)
	f.posted--
	if ref.pr != nil {
		f.probeDone(ref.pr, slot, e)
		return
	}
	b := ref.b
	c := &b.chunks[ref.c]
	conn := b.conn
	conn.addPosted(-1)
	conn.lastProgress = time.Now()
	if e != nil {
		conn.lastError = conn.lastProgress
	}
	if e == nil {
		f.finish(b, c, nil)
	} else {
		err := f.opError(c, conn, e.err, e.provErrno, e.text)
		if f.stopping || c.rr == nil {
			f.finish(b, c, err)
		} else {
			// Why did it fail? Ask the peer's status table whether the
			// region is still registered: providers report a rejected key
			// as a broken connection (tcp) or not at all (shm).
			p := f.probe(conn, c.rr)
			p.evidence = true
			p.chunks = append(p.chunks, chunkRef{b: b, c: ref.c, err: err})
		}
	}
	f.maybeRelease(conn)
}

// finish finishes chunk c of b and retires b once every op is final.
func (f *fabric) finish(b *batch, c *chunk, err error) {
	b.finishChunk(c, err)
	if b.unreported == 0 {
		delete(f.active, b)
	}
}

func (f *fabric) maybeRelease(conn *peerConn) {
	if conn.closed && conn.posted == 0 && conn.probes == 0 {
		f.releaseConn(conn)
	}
}

func (f *fabric) opError(c *chunk, conn *peerConn, code, provErrno int, text string) error {
	kind := "fi_read"
	if c.write {
		kind = "fi_write"
	}
	if code < 0 {
		code = -code
	}
	detail := fmt.Sprintf("%s %d", fiName(code), -code)
	if provErrno != 0 || text != "" {
		detail += fmt.Sprintf(", provider errno %d: %s", provErrno, text)
	}
	return fmt.Errorf("efa: %s of %d bytes to peer %s failed: %s (%s): %w", kind, c.n, conn.name, fiStrerror(code), detail, opSentinel(code))
}

func regionGone(conn *peerConn, rr *remoteRegion) error {
	return fmt.Errorf("efa: peer %s no longer has region %d registered (its status table says so): %w", conn.name, rr.id, plugins.ErrUnknownRegion)
}
