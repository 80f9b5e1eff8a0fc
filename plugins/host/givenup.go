package host

import (
	"context"
	"fmt"
	"time"

	"github.com/kvconnect/kvconnect/errdefs"
	"github.com/kvconnect/kvconnect/plugins"
)

// givenUpWait bounds how long a batch whose context ended waits for the
// plugin to report it ended (var: tests shorten it). The plugin is told
// at once (a cancellation on the ring, or CancelTransfer; the batch's
// deadline is its own too), and a transport gives up promptly: tcp
// resets the connections holding the batch's requests, so none of its
// WRITEs lands later. Transfer returning only after that report is what
// lets a caller reuse the memory and trust that a failed WRITE stays
// failed. A plugin that does not report within givenUpWait (stopped,
// wedged, or a transport that waits for its ops in flight, as ucx does
// up to its op_timeout) is left the batch: Transfer returns without it.
var givenUpWait = 5 * time.Second

// givenUp is the outcome of a batch whose context ended before the
// plugin reported it, and which the plugin then reported (err is the
// batch's error, results its ops'): the ops that failed carry ctx's
// error (whatever the transport said: the caller's deadline or cancel
// is why), the ones the plugin completed stay completed.
func givenUp(name string, ctx context.Context, results []plugins.OpResult, err error) error {
	cerr := givenUpError(name, ctx)
	failed := err != nil
	for i := range results {
		if results[i].Err != nil {
			results[i].Err, failed = cerr, true
		}
	}
	if failed {
		return cerr
	}
	return nil
}

// givenUpError is the error of a batch of plugin name whose context
// (ctx, ended) was given up on.
func givenUpError(name string, ctx context.Context) error {
	return fmt.Errorf("plugin %s: transfer: %w", name, errdefs.FromContext(ctx.Err()))
}
