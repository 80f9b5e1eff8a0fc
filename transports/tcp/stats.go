package tcp

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/kvconnect/kvconnect/plugins"
)

var _ plugins.StatsReporter = (*Transport)(nil)

// served counts what the transport served to peers, on both of its wire
// protocols (plugins.StatsReporter). Every count only grows; the data
// path adds with atomics and never blocks.
type served struct {
	ops      [2][3]atomic.Uint64 // [op kind][result]: requests
	bytes    [2][3]atomic.Uint64 // [op kind][result]: their payload bytes
	refused  [4]atomic.Uint64    // by reason, in refusalReasons' order
	mooncake atomic.Uint64       // Mooncake connections served
}

// Indexes of served's arrays.
const (
	resCompleted = iota
	resRefused
	resFailed
)

const (
	refOutOfBounds = iota
	refUnknownRegion
	refUnauthenticated
	refBadRequest
)

var (
	servedResults  = [...]string{resCompleted: plugins.ResultCompleted, resRefused: plugins.ResultRefused, resFailed: plugins.ResultFailed}
	refusalReasons = [...]string{refOutOfBounds: plugins.RefusedOutOfBounds, refUnknownRegion: plugins.RefusedUnknownRegion,
		refUnauthenticated: plugins.RefusedUnauthenticated, refBadRequest: plugins.RefusedBadRequest}
)

func kindIndex(write bool) int {
	if write {
		return int(plugins.OpWrite)
	}
	return int(plugins.OpRead)
}

// op counts one served request of n payload bytes.
func (s *served) op(write bool, result int, n uint64) {
	k := kindIndex(write)
	s.ops[k][result].Add(1)
	s.bytes[k][result].Add(n)
}

// refuse counts one refused request (write says its kind) and why.
func (s *served) refuse(write bool, n uint64, err error) {
	s.op(write, resRefused, n)
	s.refusal(refusalFor(err))
}

// refusal counts a refusal that is no op (a malformed request, a
// connection that failed authentication).
func (s *served) refusal(reason int) { s.refused[reason].Add(1) }

// refusalFor is the reason index for a region table error.
func refusalFor(err error) int {
	switch {
	case errors.Is(err, plugins.ErrOutOfBounds):
		return refOutOfBounds
	case errors.Is(err, plugins.ErrUnknownRegion):
		return refUnknownRegion
	}
	return refBadRequest
}

// Stats reports what the transport served since New: requests and bytes
// by op kind and result (an op larger than chunk_size arrives as several
// requests), refusals by reason, and Mooncake connections. A READ counts
// as completed when its data is handed to the socket, a WRITE when its
// payload is in region memory (before the acknowledgment goes out).
func (t *Transport) Stats(ctx context.Context) (plugins.ServedStats, error) {
	s := &t.served
	var st plugins.ServedStats
	for k := range s.ops {
		for r := range s.ops[k] {
			if n := s.ops[k][r].Load(); n > 0 {
				st.Ops = append(st.Ops, plugins.ServedOps{Op: plugins.OpKind(k), Result: servedResults[r], Ops: n, Bytes: s.bytes[k][r].Load()})
			}
		}
	}
	for i := range s.refused {
		if n := s.refused[i].Load(); n > 0 {
			st.Refusals = append(st.Refusals, plugins.Refusal{Reason: refusalReasons[i], Count: n})
		}
	}
	st.MooncakeConnections = s.mooncake.Load()
	return st, nil
}
