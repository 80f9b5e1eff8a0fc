package main

import (
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/kvconnect/kvconnect/config"
	"github.com/kvconnect/kvconnect/transports/ascend"
)

// hostname is Mooncake's local_hostname taken apart: "ip", "ip:port" or
// Ascend's "ip:port:npu_N" (IPv6 hosts in brackets).
type hostname struct {
	host string
	port int // 0 when absent
	npu  int // -1 when absent
}

// parseHostname decodes local_hostname. An empty one means "this host's
// outward address".
func parseHostname(s string) (hostname, error) {
	h := hostname{npu: -1}
	s = strings.TrimSpace(s)
	if s == "" {
		return h, nil
	}
	if strings.Contains(s, ":npu_") {
		host, port, npu, err := ascend.ParseSegmentName(s)
		if err != nil {
			return h, fmt.Errorf("local_hostname %q: %v (want ip, ip:port or %s)", s, err, ascend.SegmentNameForm)
		}
		h.host, h.port, h.npu = host, port, npu
		return h, nil
	}
	if host, port, err := net.SplitHostPort(s); err == nil {
		p, perr := strconv.Atoi(port)
		if perr != nil || p < 0 || p > 65535 {
			return h, fmt.Errorf("local_hostname %q: port %q is not a number in 0-65535", s, port)
		}
		if host == "" {
			return h, fmt.Errorf("local_hostname %q: no host before the port", s)
		}
		h.host, h.port = host, p
		return h, nil
	}
	if strings.ContainsAny(s, " /\\\t\n?#@,") || strings.HasPrefix(s, "[") != strings.HasSuffix(s, "]") {
		return h, fmt.Errorf("local_hostname %q: want ip, host, ip:port or %s", s, ascend.SegmentNameForm)
	}
	h.host = strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")
	return h, nil
}

// connString turns Mooncake's metadata argument (and initialize_ext's
// metadata_type) into kvconnect's metadata setting: "P2PHANDSHAKE", or a
// URL; a bare host:port means etcd, as in Mooncake.
func connString(server, typ string) (string, error) {
	server = strings.TrimSpace(server)
	switch {
	case server == "" || server == config.MetadataP2P:
		return config.MetadataP2P, nil
	case strings.Contains(server, "://"):
		return server, nil
	}
	switch typ {
	case "", "etcd":
		return "etcd://" + server, nil
	case "http", "https", "redis", "rediss":
		return typ + "://" + server, nil
	}
	return "", fmt.Errorf("metadata type %q: want etcd, http, https, redis or rediss (or a full URL as the metadata server)", typ)
}
