// Package transporttest is the conformance suite every kvconnect
// transport runs, public so that a third party's transport runs the same
// suite as the built-in ones. It checks the Transport contract of package
// plugins: round trips of many sizes at unaligned offsets, large and
// concurrent batches, READ and WRITE, absolute addressing, the owner's
// bounds checks with the neighbouring memory checked, refusals of unknown
// regions, peers and ops, a peer closing mid-batch, Close with ops in
// flight, and the lifecycle (Info before Init, Init twice, Init after
// Close, calls before Init, duplicate and overlapping regions, Deregister
// waiting for ops in flight, Close during RegisterRegion), and, for a
// transport that reports what it served (plugins.StatsReporter), that its
// counts match what peers moved.
//
// A transport runs it in each mode it can be hosted in:
//
//	func TestConformance(t *testing.T) {
//		transporttest.RunModes(t, transporttest.Modes{
//			New:    func() plugins.Transport { return mytransport.New() },
//			Binary: transporttest.BuildPlugin(t, "./cmd/kvconnect-transport-mine"),
//		})
//	}
//
// RunModes runs the suite in-process, over an in-memory gRPC connection
// (the plugin protocol without a process: no build step needed) and, when
// Binary is set, against the plugin binary launched as a subprocess. Run
// runs it once with a Harness of your own.
package transporttest

import (
	"testing"
	"time"

	"github.com/kvconnect/kvconnect/auth"
	"github.com/kvconnect/kvconnect/plugins"
)

// Harness tells the suite how to make the transport under test.
type Harness struct {
	// New returns a new, uninitialised transport for one node. It is
	// called once per node; the suite closes what it returns. InProcess,
	// InMemoryGRPC and Plugin make one for each mode.
	New func(t *testing.T) plugins.Transport
	// Options is the transport's options JSON passed to Init (may be nil).
	Options []byte
	// Hostname is passed to Init; default "127.0.0.1".
	Hostname string
	// MaxSize is the largest single op tried; default 64 MiB.
	MaxSize int
	// FailWithin bounds how long a batch may take to fail after its peer
	// closes or the local transport closes; default 10s.
	FailWithin time.Duration
	// PeerEndpoint, when set, rewrites a node's endpoint as its peers
	// see it: for a transport that speaks more than one wire protocol on
	// its endpoint, to run the suite over another one.
	PeerEndpoint func(endpoint []byte) []byte
	// Auth, when set, is every node's keyring (InitRequest.Auth): the
	// whole suite runs authenticated, and the Authentication test checks
	// that nodes without it, or with another secret, are refused. The
	// transport must report CapAuthenticates.
	Auth *auth.Keyring
}

func (h *Harness) defaults() {
	if h.Hostname == "" {
		h.Hostname = "127.0.0.1"
	}
	if h.MaxSize == 0 {
		h.MaxSize = 64 << 20
	}
	if h.FailWithin == 0 {
		h.FailWithin = 10 * time.Second
	}
}

// Run runs the whole conformance suite once.
func Run(t *testing.T, h Harness) {
	h.defaults()
	t.Run("Lifecycle", func(t *testing.T) { runLifecycle(t, h) })
	t.Run("RoundTripSizes", func(t *testing.T) { testRoundTripSizes(t, h) })
	t.Run("LargeBatch", func(t *testing.T) { testLargeBatch(t, h) })
	t.Run("ConcurrentBatches", func(t *testing.T) { testConcurrentBatches(t, h) })
	t.Run("AbsoluteAddress", func(t *testing.T) { testAbsoluteAddress(t, h) })
	t.Run("OutOfBoundsRejected", func(t *testing.T) { testOutOfBounds(t, h) })
	t.Run("UnknownRejected", func(t *testing.T) { testUnknown(t, h) })
	t.Run("DeregisteredRegionRejected", func(t *testing.T) { testDeregistered(t, h) })
	t.Run("DeregisterWaitsForOpsInFlight", func(t *testing.T) { testDeregisterInFlight(t, h) })
	t.Run("PeerClosedMidBatch", func(t *testing.T) { testPeerClosedMidBatch(t, h) })
	t.Run("CloseWithOpsInFlight", func(t *testing.T) { testCloseInFlight(t, h) })
	t.Run("ServedStats", func(t *testing.T) { testServedStats(t, h) })
	if h.Auth != nil {
		t.Run("Authentication", func(t *testing.T) { testAuthentication(t, h) })
	}
}

// Modes says how to host the transport under test in each mode.
type Modes struct {
	// New makes the transport in-process (also served over in-memory
	// gRPC). Required.
	New func() plugins.Transport
	// Binary is the transport's plugin executable (see BuildPlugin); the
	// plugin mode is skipped when it is empty.
	Binary string
	// Env is extra environment for the plugin process.
	Env []string
	// Options, Hostname, MaxSize, FailWithin, PeerEndpoint and Auth are
	// as in Harness.
	Options      []byte
	Hostname     string
	MaxSize      int
	FailWithin   time.Duration
	PeerEndpoint func([]byte) []byte
	Auth         *auth.Keyring
}

// RunModes runs the suite in every mode: "InProcess", "InMemoryGRPC" and,
// when m.Binary is set, "Plugin".
func RunModes(t *testing.T, m Modes) {
	h := Harness{Options: m.Options, Hostname: m.Hostname, MaxSize: m.MaxSize, FailWithin: m.FailWithin, PeerEndpoint: m.PeerEndpoint, Auth: m.Auth}
	t.Run("InProcess", func(t *testing.T) {
		h := h
		h.New = InProcess(m.New)
		Run(t, h)
	})
	t.Run("InMemoryGRPC", func(t *testing.T) {
		h := h
		h.New = InMemoryGRPC(m.New)
		Run(t, h)
	})
	if m.Binary != "" {
		t.Run("Plugin", func(t *testing.T) {
			h := h
			h.New = Plugin(m.Binary, m.Env...)
			Run(t, h)
		})
	}
}
