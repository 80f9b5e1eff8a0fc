package metrics

// Events the node records as they happen.

// PluginStarted records a transport plugin process launched.
func (n *Node) PluginStarted(transport string) { n.pluginStarts.WithLabelValues(transport).Inc() }

// PluginCrashed records a transport plugin process that died while the
// node ran.
func (n *Node) PluginCrashed(transport string) { n.pluginCrashes.WithLabelValues(transport).Inc() }

// Handshake records a handshake this node made to fetch a peer's
// descriptor, and its outcome (nil: ok).
func (n *Node) Handshake(err error) { n.handshakes.WithLabelValues(kindLabel(err)).Inc() }

// Handshake refusal reasons.
const (
	HandshakeUnauthenticated = "unauthenticated"
	HandshakeBadRequest      = "bad_request"
	// HandshakeNoMemory: the request did not fit in max_handshake_memory
	// within its timeout.
	HandshakeNoMemory = "no_memory"
)

// HandshakeRefused records a handshake connection the RPC port refused,
// with reason HandshakeUnauthenticated, HandshakeBadRequest or
// HandshakeNoMemory.
func (n *Node) HandshakeRefused(reason string) {
	n.handshakeRefusals.WithLabelValues(oneOf(reason, []string{HandshakeUnauthenticated, HandshakeBadRequest, HandshakeNoMemory})).Inc()
}

// PeerSuspect records a peer that became suspect.
func (n *Node) PeerSuspect() { n.suspects.Inc() }

// PeerFastFail records a batch failed at once because its peer was
// suspect.
func (n *Node) PeerFastFail() { n.fastFails.Inc() }

// MooncakePeerOpened records a connection opened to a Mooncake Transfer
// Engine peer.
func (n *Node) MooncakePeerOpened() { n.mooncakeOpened.Inc() }
