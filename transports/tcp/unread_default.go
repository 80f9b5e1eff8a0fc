//go:build !linux

package tcp

import "net"

// unreadBytes is not known on this platform: v1 READs do not wait.
func unreadBytes(net.Conn) int { return 0 }

// acceptPending is not known on this platform.
func acceptPending(net.Listener) bool { return false }

// idleState is not known on this platform: a connection the peer closed
// while idle is found broken by the next request on it.
func idleState(net.Conn) error { return nil }
