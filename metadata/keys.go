package metadata

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"strconv"
	"strings"

	"github.com/kvconnect/kvconnect/errdefs"
)

// Keys builds Mooncake's metadata keys for one cluster:
//
//	mooncake/[cluster/]ram/<segment>       the segment descriptor
//	mooncake/[cluster/]<segment>           the same, when the segment name holds a "/"
//	mooncake/[cluster/]rpc_meta/<segment>  the RPC location {"ip_or_host_name","rpc_port"}
//
// The zero value is the layout without a cluster id. Keys is a value and
// safe for concurrent use.
type Keys struct{ prefix string }

// NewKeys returns the key layout for a cluster id (Mooncake's
// MC_METADATA_CLUSTER_ID; "" for none). As in Mooncake, a "/" is appended
// to a cluster id that does not end with one.
func NewKeys(clusterID string) Keys {
	if clusterID == "" {
		return Keys{prefix: "mooncake/"}
	}
	if !strings.HasSuffix(clusterID, "/") {
		clusterID += "/"
	}
	return Keys{prefix: "mooncake/" + clusterID}
}

// Prefix is the common prefix of every key of the cluster
// ("mooncake/" or "mooncake/<cluster>/").
func (k Keys) Prefix() string {
	if k.prefix == "" {
		return "mooncake/"
	}
	return k.prefix
}

// Segment is the key of a segment's descriptor.
func (k Keys) Segment(segment string) string {
	if strings.Contains(segment, "/") {
		return k.Prefix() + segment
	}
	return k.Prefix() + "ram/" + segment
}

// RPC is the key of a segment's RPC location.
func (k Keys) RPC(segment string) string { return k.Prefix() + "rpc_meta/" + segment }

// RPCLocation is where a node's RPC (handshake) port is, as Mooncake
// stores it under rpc_meta/<segment>.
type RPCLocation struct {
	Host string `json:"ip_or_host_name"`
	Port int    `json:"rpc_port"`
}

// String returns host:port.
func (r RPCLocation) String() string { return net.JoinHostPort(r.Host, strconv.Itoa(r.Port)) }

// check says what is wrong with r ("" when nothing is).
func (r RPCLocation) check() string {
	switch {
	case r.Host == "":
		return "ip_or_host_name is empty"
	case strings.ContainsAny(r.Host, " \t\r\n/\\\"'{}[]@"):
		return fmt.Sprintf("ip_or_host_name %q is not a host name or IP address", r.Host)
	case r.Port < 1 || r.Port > 65535:
		return fmt.Sprintf("rpc_port %d is not between 1 and 65535", r.Port)
	}
	return ""
}

// Encode returns the JSON Mooncake writes under rpc_meta/<segment>
// (compact, rpc_port a number).
func (r RPCLocation) Encode() []byte {
	b, _ := json.Marshal(r) // a struct of a string and an int cannot fail
	return b
}

// DecodeRPCLocation reads an rpc_meta value: a JSON object with a
// non-empty ip_or_host_name string and an rpc_port number between 1 and
// 65535 (other members are ignored). Errors wrap errdefs.ErrProtocol.
func DecodeRPCLocation(b []byte) (RPCLocation, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil || raw == nil {
		return RPCLocation{}, fmt.Errorf("%w: not a JSON object: %s", errdefs.ErrProtocol, snippet(b))
	}
	var r RPCLocation
	if err := json.Unmarshal(raw["ip_or_host_name"], &r.Host); err != nil {
		return RPCLocation{}, fmt.Errorf("%w: ip_or_host_name is not a string: %s", errdefs.ErrProtocol, snippet(b))
	}
	var port float64
	if err := json.Unmarshal(raw["rpc_port"], &port); err != nil || port != math.Trunc(port) || port < 0 || port > 65535 {
		return RPCLocation{}, fmt.Errorf("%w: rpc_port is not a port number: %s", errdefs.ErrProtocol, snippet(b))
	}
	r.Port = int(port)
	if reason := r.check(); reason != "" {
		return RPCLocation{}, fmt.Errorf("%w: %s", errdefs.ErrProtocol, reason)
	}
	return r, nil
}

// DescriptorName checks that b looks like a segment descriptor (a JSON
// object with a non-empty "name" string, which every Mooncake and
// kvconnect descriptor has) and returns the name. Errors wrap
// errdefs.ErrProtocol. It does not decode the rest: that is the
// connector's.
func DescriptorName(b []byte) (string, error) {
	var d struct {
		Name *string `json:"name"`
	}
	t := bytes.TrimSpace(b)
	if len(t) == 0 || t[0] != '{' {
		return "", fmt.Errorf("%w: not a JSON object: %s", errdefs.ErrProtocol, snippet(b))
	}
	if err := json.Unmarshal(t, &d); err != nil {
		return "", fmt.Errorf("%w: not a segment descriptor (%v): %s", errdefs.ErrProtocol, err, snippet(b))
	}
	if d.Name == nil || *d.Name == "" {
		return "", fmt.Errorf("%w: not a segment descriptor (no \"name\"): %s", errdefs.ErrProtocol, snippet(b))
	}
	return *d.Name, nil
}

// snippet shows the start of a value in an error.
func snippet(b []byte) string {
	const max = 64
	if len(b) <= max {
		return strconv.Quote(string(b))
	}
	return strconv.Quote(string(b[:max])) + fmt.Sprintf("... (%d bytes)", len(b))
}

// EscapeKey escapes a key for the ?key= query parameter of Mooncake's HTTP
// metadata protocol the way Mooncake's client does (curl_easy_escape):
// every byte but ASCII letters, digits and -._~ becomes %XX.
func EscapeKey(key string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(key) * 3 / 2)
	for i := 0; i < len(key); i++ {
		c := key[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~' {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	return b.String()
}
