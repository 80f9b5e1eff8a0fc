package plugins

import (
	"context"
	"fmt"

	"github.com/kvconnect/kvconnect/internal/pluginrpc"
	"github.com/kvconnect/kvconnect/internal/pluginrpc/proto"
)

// Stats answers the host's Stats call with the transport's StatsReporter,
// or not_supported when the transport has none.
func (s *grpcServer) Stats(ctx context.Context, _ *proto.StatsRequest) (*proto.StatsResponse, error) {
	sr, ok := s.impl.(StatsReporter)
	if !ok {
		return nil, pluginrpc.ToStatus(fmt.Errorf("stats: the transport does not report served counts (plugins.StatsReporter): %w", ErrNotSupported))
	}
	st, err := sr.Stats(ctx)
	if err != nil {
		return nil, pluginrpc.ToStatus(err)
	}
	return statsToWire(st), nil
}

// statsToWire encodes st for the plugin protocol (plugins/host decodes
// it).
func statsToWire(st ServedStats) *proto.StatsResponse {
	r := &proto.StatsResponse{MooncakeConnections: st.MooncakeConnections}
	for _, o := range st.Ops {
		r.Served = append(r.Served, &proto.ServedCount{Op: uint32(o.Op), Result: o.Result, Ops: o.Ops, Bytes: o.Bytes})
	}
	for _, f := range st.Refusals {
		r.Refusals = append(r.Refusals, &proto.RefusalCount{Reason: f.Reason, Count: f.Count})
	}
	return r
}

// RingStats answers the host's RingStats call with what the ring's
// server counted, or not_supported when no ring is open.
func (s *grpcServer) RingStats(context.Context, *proto.RingStatsRequest) (*proto.RingStatsResponse, error) {
	s.mu.Lock()
	rs := s.ring
	s.mu.Unlock()
	if rs == nil {
		return nil, pluginrpc.ToStatus(fmt.Errorf("ring stats: no ring is open (the host did not call OpenRing, or it failed): %w", ErrNotSupported))
	}
	return &proto.RingStatsResponse{
		ClaimedBySpinner: uint64(rs.bySpinner.Load()),
		ClaimedBySleeper: uint64(rs.bySleeper.Load()),
		ClaimedByStandby: uint64(rs.byStandby.Load()),
	}, nil
}
