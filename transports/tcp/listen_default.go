//go:build !linux

package tcp

import "net"

// listenConfig leaves accepted connections' keepalive to Go's default,
// set on each connection as it is accepted.
func listenConfig() net.ListenConfig { return net.ListenConfig{} }
