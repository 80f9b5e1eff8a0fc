package tcp

import (
	"net"
	"testing"
)

// TestSameHost: the unsent-bytes limit of a Mooncake READ's answer
// (mooncakeUnsent) applies only to a peer on this host.
func TestSameHost(t *testing.T) {
	tcp := func(ip string) net.Addr { return &net.TCPAddr{IP: net.ParseIP(ip), Port: 1} }
	for _, c := range []struct {
		local, remote net.Addr
		want          bool
	}{
		{tcp("127.0.0.1"), tcp("127.0.0.1"), true},
		{tcp("192.0.2.2"), tcp("127.0.0.1"), true},        // a loopback peer
		{tcp("::1"), tcp("::1"), true},                    // IPv6 loopback
		{tcp("192.0.2.2"), tcp("192.0.2.2"), true},        // a node dialing its own outward address
		{tcp("::ffff:192.0.2.2"), tcp("192.0.2.2"), true}, // a dual-stack listener's view of it
		{tcp("192.0.2.2"), tcp("192.0.2.3"), false},       // another host
		{tcp("2001:db8::1"), tcp("2001:db8::2"), false},
		{&net.UnixAddr{Name: "a"}, &net.UnixAddr{Name: "a"}, false},
	} {
		if got := sameHost(c.local, c.remote); got != c.want {
			t.Errorf("sameHost(%v, %v) = %v, want %v", c.local, c.remote, got, c.want)
		}
	}
}
