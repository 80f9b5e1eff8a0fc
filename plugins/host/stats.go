package host

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kvconnect/kvconnect/errdefs"
	"github.com/kvconnect/kvconnect/internal/pluginrpc"
	"github.com/kvconnect/kvconnect/internal/pluginrpc/proto"
	"github.com/kvconnect/kvconnect/plugins"
)

var _ plugins.StatsReporter = (*grpcClient)(nil)

// Stats asks the plugin what its transport served to peers. A plugin
// whose transport does not report them, or one built before the call
// existed, answers an error wrapping errdefs.ErrNotSupported.
func (c *grpcClient) Stats(ctx context.Context) (plugins.ServedStats, error) {
	r, err := c.rpc.Stats(ctx, &proto.StatsRequest{})
	if err != nil {
		return plugins.ServedStats{}, c.optionalCallError(ctx, "stats", "Stats", err)
	}
	return statsFromWire(r), nil
}

// optionalCallError maps the error of a call a plugin may lack (Stats,
// RingStats; op names it in messages, rpc is the call's name): the
// plugin's own error as it sent it, UNIMPLEMENTED (a plugin built before
// the call) as errdefs.ErrNotSupported, anything else as every call's.
func (c *grpcClient) optionalCallError(ctx context.Context, op, rpc string, err error) error {
	if rebuilt, ok := pluginrpc.FromStatus(err); ok {
		return rebuilt
	}
	if st, ok := status.FromError(err); ok && st.Code() == codes.Unimplemented && ctx.Err() == nil {
		return fmt.Errorf("plugin %s: %s: %s (a plugin built before the %s call): %w", c.name, op, st.Message(), rpc, errdefs.ErrNotSupported)
	}
	return c.fromStatus(ctx, op, err)
}

// statsFromWire decodes the plugin's answer. Values are kept as sent; the
// host's metrics bound them.
func statsFromWire(r *proto.StatsResponse) plugins.ServedStats {
	st := plugins.ServedStats{MooncakeConnections: r.GetMooncakeConnections()}
	for _, o := range r.GetServed() {
		kind := plugins.OpKind(0xFF) // not an op kind: the metrics leave it out
		if o.Op <= uint32(plugins.OpWrite) {
			kind = plugins.OpKind(o.Op)
		}
		st.Ops = append(st.Ops, plugins.ServedOps{Op: kind, Result: o.Result, Ops: o.Ops, Bytes: o.Bytes})
	}
	for _, f := range r.GetRefusals() {
		st.Refusals = append(st.Refusals, plugins.Refusal{Reason: f.Reason, Count: f.Count})
	}
	return st
}
