package tcp

import (
	"time"

	"go.uber.org/zap"

	"github.com/kvconnect/kvconnect/plugins/regions"
	"github.com/kvconnect/kvconnect/transports/tcp/internal/wire"
)

// groupScratch is a connection server's memory for groups, kept across
// them.
type groupScratch struct {
	hs   []wire.Header
	ents []*regions.Entry
	mems [][]byte
}

// group serves the requests of the group g announces, in order, as
// request serves them one by one, except that a run of WRITEs whose
// ranges resolve has its payloads read together (frameReader.payloads).
// False: the connection is to end.
func (tc *targetConn) group(fr *frameReader, fw *frameWriter, g *wire.Header, sc *stateCheck, gs *groupScratch) bool {
	t := tc.t
	// The table follows its header at once: read it under a deadline, as
	// a payload (one left from an earlier payload may be about to pass).
	if uint64(fr.Buffered()) < g.Length {
		tc.dl.armRead(tc.nc, time.Duration(t.opts.OpTimeout))
	}
	hs, err := fr.group(g, gs.hs, false)
	gs.hs = hs
	if err != nil {
		t.served.refusal(refBadRequest)
		t.warn.Warn("malformed", "tcp: dropping a connection after a malformed group of requests", zap.String("remote", tc.nc.RemoteAddr().String()), zap.Error(err))
		return false
	}
	for i := 0; i < len(hs); {
		n := tc.writeRun(fr, fw, hs[i:], sc, gs)
		if n < 0 {
			return false
		}
		if n == 0 {
			// Not a WRITE, or one whose range does not resolve.
			if !tc.request(fr, fw, &hs[i], sc) {
				return false
			}
			n = 1
		}
		i += n
	}
	return true
}

// writeRun serves the WRITEs at the front of hs whose ranges resolve,
// their payloads read together, and says how many it served (0: the
// first is not such a WRITE; -1: the connection is to end).
func (tc *targetConn) writeRun(fr *frameReader, fw *frameWriter, hs []wire.Header, sc *stateCheck, gs *groupScratch) int {
	t := tc.t
	ents, mems := gs.ents[:0], gs.mems[:0]
	defer func() {
		for _, e := range ents {
			e.Release()
		}
		clear(ents)
		clear(mems)
		gs.ents, gs.mems = ents[:0], mems[:0]
	}()
	var total uint64
	for i := range hs {
		h := &hs[i]
		if h.Op != wire.OpWrite || h.Length == 0 {
			// request serves a WRITE of no bytes (no place to read into:
			// frameReader.payloads takes none)
			break
		}
		e, mem, err := t.regions.Resolve(h.Region, h.Offset, h.Length)
		if err != nil {
			break
		}
		ents, mems = append(ents, e), append(mems, mem)
		total += h.Length
	}
	n := len(mems)
	if n == 0 {
		return 0
	}
	// As request does for one WRITE: the initiator may have given up, and
	// what is not buffered is read under a deadline.
	if sc.due(total) && abandoned(tc.nc) {
		for _, h := range hs[:n] {
			t.served.op(true, resFailed, h.Length)
		}
		return -1
	}
	if uint64(fr.Buffered()) < total {
		tc.dl.armRead(tc.nc, time.Duration(t.opts.OpTimeout))
	}
	if _, err := fr.payloads(mems); err != nil {
		for _, h := range hs[:n] {
			t.served.op(true, resFailed, h.Length)
		}
		return -1
	}
	flush := false
	for _, h := range hs[:n] {
		t.served.op(true, resCompleted, h.Length)
		resp := wire.Header{Op: wire.OpWriteAck, ReqID: h.ReqID, Region: wire.FeatureGroups}
		if err := fw.frame(&resp, nil, nil); err != nil {
			return -1
		}
		flush = flush || h.Status&wire.FlagFlush != 0
	}
	if flush {
		if err := fw.flush(); err != nil {
			return -1
		}
	}
	return n
}
