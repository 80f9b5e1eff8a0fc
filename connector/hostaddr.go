package connector

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"
)

// OutwardAddress is the address a node uses as its hostname when none is
// set, and how it was found (for people). It is found as vLLM's get_ip()
// finds it: the source address of the
// default route (a UDP "connection" to a public address sends nothing),
// else the first address of an interface that is up and not loopback,
// else loopback, with a note saying so.
func OutwardAddress() (addr, how string) {
	for _, probe := range []string{"8.8.8.8:53", "[2001:4860:4860::8888]:53"} {
		if nc, err := net.Dial("udp", probe); err == nil {
			ip := nc.LocalAddr().(*net.UDPAddr).IP
			nc.Close()
			if !ip.IsLoopback() && !ip.IsUnspecified() {
				return ip.String(), "the source address of the default route"
			}
		}
	}
	if ifs, err := net.Interfaces(); err == nil {
		for _, ifc := range ifs {
			if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 {
				continue
			}
			addrs, _ := ifc.Addrs()
			for _, a := range addrs {
				if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil && !ipn.IP.IsLinkLocalUnicast() {
					return ipn.IP.String(), "the address of interface " + ifc.Name + " (there is no default route)"
				}
			}
		}
	}
	return "127.0.0.1", "loopback: this host has no default route and no other interface up, so only peers on this host can reach it (set hostname)"
}

// resolveHostname checks that the configured hostname resolves, so the
// node does not advertise a session id nobody can reach.
func resolveHostname(ctx context.Context, host string, timeout time.Duration) error {
	if net.ParseIP(host) != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, min(timeout, 10*time.Second))
	defer cancel()
	addrs, err := net.DefaultResolver.LookupHost(ctx, host)
	if err != nil || len(addrs) == 0 {
		if err == nil {
			err = errors.New("no addresses")
		}
		return fmt.Errorf("connector: hostname %q does not resolve (%w): peers could not reach this node; set hostname to a name that resolves, or to an address of this host (empty picks the outward address): %w",
			host, err, ErrInvalidArgument)
	}
	return nil
}

// listenError explains why a listener could not be bound: which setting,
// the address and port, and the cause in words.
func listenError(what, setting, addr string, err error) error {
	host, port, _ := net.SplitHostPort(addr)
	cause := err.Error()
	switch {
	case errors.Is(err, syscall.EADDRINUSE):
		cause = fmt.Sprintf("address in use: another process listens on port %s (find it with: ss -ltnp 'sport = :%s'); choose another %s, or 0 for a free port", port, port, setting)
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		check := setting
		if setting == "rpc_port" {
			check = "bind_address"
		}
		cause = fmt.Sprintf("address not available: %s is not an address of this host (check %s)", host, check)
	case errors.Is(err, syscall.EACCES):
		cause = fmt.Sprintf("permission denied: port %s needs privileges; choose a port above 1023", port)
	}
	if host == "" {
		host = "every interface"
	}
	return fmt.Errorf("connector: %s: cannot listen on %s port %s: %s: %w", what, host, port, cause, ErrInvalidArgument)
}
