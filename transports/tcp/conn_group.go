package tcp

import (
	"fmt"

	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/transports/tcp/internal/wire"
)

// readGroup reads a group of responses, whose group header g readOne
// read, and completes the chunks at the head of the queue with them, as
// readOne does one response, except that the READ responses' payloads
// are read together (frameReader.payloads). The caller holds the read
// side; an error breaks the connection (the caller fails it), after
// every chunk the group answers has completed.
func (c *conn) readGroup(g *wire.Header, release bool) (released bool, err error) {
	hs, err := c.fr.group(g, c.hs, true)
	c.hs = hs
	if err != nil {
		return false, fmt.Errorf("tcp: peer %s sent a malformed group of responses: %v: %w", c.p.name, err, plugins.ErrProtocol)
	}
	c.mu.Lock()
	if c.sent-c.head < len(hs) {
		out := c.sent - c.head
		c.mu.Unlock()
		return false, fmt.Errorf("tcp: peer %s sent a group of %d responses with %d requests outstanding: %w", c.p.name, len(hs), out, plugins.ErrProtocol)
	}
	chs := append(c.gchs[:0], c.queue[c.head:c.head+len(hs)]...)
	clear(c.queue[c.head : c.head+len(hs)])
	c.head += len(hs)
	if c.head == len(c.queue) {
		c.queue, c.head, c.sent = c.queue[:0], 0, 0
	}
	c.mu.Unlock()
	mems := c.mems[:0]
	defer func() {
		clear(chs)
		clear(mems)
		if !released { // still the read side's: keep the scratch for the next group
			c.gchs, c.mems = chs[:0], mems[:0]
		}
	}()
	for i := range hs {
		if err := c.checkResponse(&hs[i], chs[i]); err != nil {
			completeAll(chs, err)
			return false, err
		}
		if hs[i].Op == wire.OpReadResp && hs[i].Status == wire.StatusOK {
			mems = append(mems, chs[i].local)
		}
		if hs[i].Region&wire.FeatureGroups != 0 && !c.groups.Load() {
			c.groups.Store(true)
		}
	}
	if len(mems) > 0 {
		if _, err := c.fr.payloads(mems); err != nil {
			err = c.brokenBy(c.receiveErr(err))
			completeAll(chs, err)
			return false, err
		}
	}
	c.progress.Add(uint64(len(hs)))
	if release {
		// Giving up the read side hands the scratch (c.hs, c.gchs,
		// c.mems) to the next reader, which may read a group while this
		// one completes its chunks: this group keeps its own slices, and
		// the next reader makes new ones.
		c.hs, c.gchs, c.mems = nil, nil, nil
		if released = c.releaseIfIdle(); !released {
			c.hs = hs
		}
	}
	for i, ch := range chs {
		if st := hs[i].Status; st != wire.StatusOK {
			ch.complete(ch.remoteError(c.p.name, st))
		} else {
			ch.complete(nil)
		}
	}
	return released, nil
}

// checkResponse says whether h is a well-formed answer to ch.
func (c *conn) checkResponse(h *wire.Header, ch *chunk) error {
	want := wire.OpWriteAck
	if ch.op == wire.OpRead {
		want = wire.OpReadResp
	}
	switch {
	case h.ReqID != ch.reqID || h.Op != want:
		return fmt.Errorf("tcp: peer %s answered request %d (%s) with %s for request %d: %w", c.p.name, ch.reqID, ch.op, h.Op, h.ReqID, plugins.ErrProtocol)
	case h.Status != wire.StatusOK && h.Length != 0:
		return fmt.Errorf("tcp: peer %s sent payload with error status %s: %w", c.p.name, h.Status, plugins.ErrProtocol)
	case h.Status == wire.StatusOK && ch.op == wire.OpRead && h.Length != uint64(len(ch.local)):
		return fmt.Errorf("tcp: peer %s answered a %d-byte read with %d bytes: %w", c.p.name, len(ch.local), h.Length, plugins.ErrProtocol)
	}
	return nil
}

// completeAll completes every chunk in chs with err.
func completeAll(chs []*chunk, err error) {
	for _, ch := range chs {
		ch.complete(err)
	}
}
