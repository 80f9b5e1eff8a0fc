package tcp

import (
	"context"
	"net"
	"time"
)

// A caller whose lone small op is the only request on its connection
// reads the response itself (conn.readOwn), and first polls the socket
// without sleeping, for up to maxLoneSpin, before it waits in the
// runtime's poller, while spinning pays for this peer (measured per
// peer: a spin.Chooser compares epochs of spinning and of sleeping).
// Sleeping there costs a wake-up when the answer comes, and on a
// virtual machine whose idle processor halts that wake-up can cost more
// than the round trip: 4 KiB single WRITE, nodes in two processes,
// Intel Xeon VM, p50 44–53 µs sleeping against 16–31 µs polling
// (docs/DATAPATH-ROUNDS.md, sixth round). A spin stops when the spinner finds
// it was descheduled; whether to spin at all on a busy machine is the
// Chooser's measure (eighth round). Only lone ops spin: a batch's
// responses are read by the connection's reader goroutine, which has
// others to wake. Nor do the ops of a batch whose completion the plugin
// host polls already (plugins.CompletionPolled: the transport running
// as a plugin, its batches coming through a ring): two spinners for one
// op take both processors of a small machine, and the peer waits for
// one.
const maxLoneSpin = 100 * time.Microsecond

// The wait the Chooser compares runs from the moment the caller began
// sending its request, not from the start of its read. On a loaded
// machine the caller is often descheduled in its write (the loopback
// write wakes the peer, which takes the processor), and the answer is
// there when its read starts: measured from there, spinning and sleeping
// both looked like 3–4 µs waits where the ops took 40–65 µs, and the
// Chooser's pick between them was blind (docs/DATAPATH-ROUNDS.md, twenty-eighth
// round). The spin's budget still starts with the read.
//
// testAfterLoneWrite, when set by a test, runs between a lone op's
// write and its read: a caller descheduled there.
var testAfterLoneWrite func()

// testBeforeLoneWrite, when set by a test, runs just before a lone op's
// caller writes its request itself (conn.enqueue), with the connection.
var testBeforeLoneWrite func(net.Conn)

// EnvLoneSpin is the tuning knob fixing the lone op's spin: a Go
// duration, or 0 for none (a measurement aid, like the rings' knobs).
const EnvLoneSpin = "KVCONNECT_TCP_SPIN"

// spinEnd is when a lone op's spin that starts at start with budget ends:
// never past ctx's deadline (the spin cannot see the socket's).
func spinEnd(ctx context.Context, start time.Time, budget time.Duration) time.Time {
	until := start.Add(budget)
	if d, ok := ctx.Deadline(); ok && d.Before(until) {
		return d
	}
	return until
}
