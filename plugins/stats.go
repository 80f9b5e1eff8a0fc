package plugins

import "context"

// StatsReporter is an optional capability of a Transport: it reports what
// it served to peers (the owner's side of their ops), so the host's
// metrics cover both directions although the serving happens inside the
// plugin process. The host finds it with a type assertion, in-process and
// through a plugin alike (a plugin built without it answers
// ErrNotSupported).
//
// Stats may be called at any time and from many goroutines at once, also
// before Init and after Close (then it reports what was counted so far,
// or zeros). It must be cheap and must not block on the data path: the
// host calls it at scrape time with a short deadline. Every count is
// monotonically increasing over the life of the transport value; the host
// keeps the sum of what earlier plugin instances reported, so counts
// survive a plugin restart. A served op is counted by the time its
// initiator can see it complete (count a READ before its data goes out,
// a WRITE before its acknowledgment), so a scrape after a batch completed
// sees it on both nodes.
type StatsReporter interface {
	Stats(ctx context.Context) (ServedStats, error)
}

// ServedStats counts what a transport served to its peers since it was
// made. Every field only grows.
type ServedStats struct {
	// Ops counts served requests by op kind and result, with their
	// payload bytes (the bytes asked for: for ResultCompleted the bytes
	// moved). A transport that splits ops into chunks on the wire counts
	// each request it serves, so served ops may outnumber the peers' ops;
	// bytes are the same. At most one entry per (Op, Result).
	Ops []ServedOps
	// Refusals counts requests and connections the memory owner refused,
	// by reason (one of the Refused* constants). At most one entry per
	// reason.
	Refusals []Refusal
	// MooncakeConnections counts connections from Mooncake Transfer
	// Engine peers served (Mooncake opens one per request unless its
	// connection pool is on).
	MooncakeConnections uint64
}

// ServedOps is one (op kind, result) count of ServedStats.
type ServedOps struct {
	Op     OpKind
	Result string // ResultCompleted, ResultRefused or ResultFailed
	Ops    uint64
	Bytes  uint64
}

// Refusal is one reason's count of ServedStats.
type Refusal struct {
	Reason string // one of the Refused* constants
	Count  uint64
}

// Results of a served op.
const (
	// ResultCompleted: the op was served in full.
	ResultCompleted = "completed"
	// ResultRefused: the owner's check refused it (see Refusals for why);
	// no memory was touched.
	ResultRefused = "refused"
	// ResultFailed: the connection broke or timed out while it was served.
	ResultFailed = "failed"
)

// Reasons a memory owner refuses a request or a connection.
const (
	RefusedOutOfBounds     = "out_of_bounds"   // the range is not inside the region (ErrOutOfBounds)
	RefusedUnknownRegion   = "unknown_region"  // no such region id, or no region at that address (ErrUnknownRegion)
	RefusedUnauthenticated = "unauthenticated" // a data connection that failed authentication (ErrUnauthenticated)
	RefusedBadRequest      = "bad_request"     // a malformed request
)

// ServedResults lists the Result values of ServedOps.
func ServedResults() []string { return []string{ResultCompleted, ResultRefused, ResultFailed} }

// RefusalReasons lists the Reason values of Refusal.
func RefusalReasons() []string {
	return []string{RefusedOutOfBounds, RefusedUnknownRegion, RefusedUnauthenticated, RefusedBadRequest}
}
