package config

import (
	"fmt"
	"net"
	"strconv"
	"strings"
)

// metricsAddressAllowed says what metrics_address accepts.
const metricsAddressAllowed = "host:port, :port or a port (0..65535; 0 picks a free one), the host defaulting to bind_address; empty = off"

// MetricsListenAddress is where the metrics endpoint listens: the host
// and port of MetricsAddress, with BindAddress as the host when it has
// none (":9464" or "9464"; "" = every interface when BindAddress is empty
// too). It is "" when metrics_address is empty (the endpoint is off), and
// an error (wrapping ErrInvalid) when it is malformed.
func (c Config) MetricsListenAddress() (string, error) {
	a := strings.TrimSpace(c.MetricsAddress)
	if a == "" {
		return "", nil
	}
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		if strings.Contains(a, ":") {
			return "", fmt.Errorf("metrics_address %q: %v: want %s: %w", c.MetricsAddress, err, metricsAddressAllowed, ErrInvalid)
		}
		host, port = "", a // a bare port
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 0 || n > 65535 {
		return "", fmt.Errorf("metrics_address %q: port %q: want %s: %w", c.MetricsAddress, port, metricsAddressAllowed, ErrInvalid)
	}
	if host == "" {
		host = c.BindAddress
	}
	return net.JoinHostPort(host, strconv.Itoa(n)), nil
}

// metricsAddress checks metrics_address.
func (ck *checker) metricsAddress(a string) {
	if strings.TrimSpace(a) == "" {
		return
	}
	if _, err := (Config{MetricsAddress: a}).MetricsListenAddress(); err != nil {
		ck.add(&Problem{Key: "metrics_address", Value: a, Allowed: metricsAddressAllowed})
		return
	}
	if host, _, err := net.SplitHostPort(a); err == nil && host != "" {
		if strings.ContainsAny(host, " \t\r\n/\\\"'{}[]@") {
			ck.add(&Problem{Key: "metrics_address", Value: a, Reason: "the host is not a host name or IP address", Allowed: metricsAddressAllowed})
		}
	}
}
