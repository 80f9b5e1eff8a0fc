// Package config loads a kvconnect node's settings in layers, later layers
// winning: built-in defaults, a config file (YAML, TOML or JSON), a vLLM
// kv_transfer_config, the environment (KVCONNECT_* and the SGLang /
// Mooncake names operators already set), then command-line flags. Every
// effective value remembers where it came from, and every bad key or value
// is an error that names the key, the value, its source and what is
// allowed.
package config

import (
	"fmt"
	"sort"
	"strings"
)

type kind int

const (
	kindString kind = iota
	kindInt
	kindDuration
	kindSize
	kindList
	kindBool
)

func (k kind) String() string {
	switch k {
	case kindInt:
		return "an integer"
	case kindDuration:
		return "a duration like 30s"
	case kindSize:
		return "a size like 64MiB or a number of bytes"
	case kindList:
		return "a list of names"
	case kindBool:
		return "true or false"
	}
	return "a string"
}

// setting describes one configuration key.
type setting struct {
	key     string
	kind    kind
	def     any
	help    string
	allowed []string // for strings with a fixed set of values
	flag    string   // flag name; "" = no flag
	min     int64    // for ints
	max     int64
}

// Known transport names, for suggestions. Third-party plugins may add
// more; protocol accepts any well-formed name.
var knownTransports = []string{"tcp", "rdma", "ucx", "efa", "ascend"}

var settings = []setting{
	{key: "protocol", kind: kindString, def: "tcp", flag: "protocol",
		help: "transport to use first: tcp, rdma, ucx, efa, ascend, or a third-party plugin's name"},
	{key: "device_name", kind: kindString, def: "", flag: "device-name",
		help: `device(s) for the transport: empty = auto, "mlx5_0", "mlx5_0,mlx5_1", a JSON map per local device index, or a path to a .json file holding that map`},
	{key: "hostname", kind: kindString, def: DefaultHostname, flag: "hostname",
		help: "host (name or IP) peers use to reach this node"},
	{key: "rpc_port", kind: kindInt, def: int64(0), flag: "rpc-port", min: 0, max: 65535,
		help: "handshake port; 0 picks a free one"},
	{key: "metadata", kind: kindString, def: MetadataP2P, flag: "metadata",
		help: "metadata mode: P2PHANDSHAKE (etcd://, http://, redis:// are planned)"},
	{key: "plugin_dir", kind: kindString, def: "", flag: "plugin-dir",
		help: "directory searched first for kvconnect-transport-<name> binaries"},
	{key: "connect_timeout", kind: kindDuration, def: DefaultConnectTimeout, flag: "connect-timeout",
		help: "bound on opening a peer"},
	{key: "transfer_timeout", kind: kindDuration, def: DefaultTransferTimeout, flag: "transfer-timeout",
		help: "bound on a batch (Mooncake's MC_TRANSFER_TIMEOUT)"},
	{key: "max_handshake_frame", kind: kindSize, def: uint64(DefaultMaxHandshakeFrame), flag: "",
		help: "largest handshake frame accepted"},
	{key: "log_level", kind: kindString, def: "info", flag: "log-level", allowed: []string{"debug", "info", "warn", "error"},
		help: "log level"},
	{key: "log_format", kind: kindString, def: "console", flag: "log-format", allowed: []string{"console", "json"},
		help: "log format"},
}

// transportsKey is the subtree holding each transport's own options.
const transportsKey = "transports"

func lookupSetting(key string) (*setting, bool) {
	for i := range settings {
		if settings[i].key == key {
			return &settings[i], true
		}
	}
	return nil, false
}

func settingKeys() []string {
	out := make([]string, 0, len(settings)+1)
	for _, s := range settings {
		out = append(out, s.key)
	}
	out = append(out, transportsKey+".<transport>.<option>")
	sort.Strings(out)
	return out
}

// keyForEnv maps a KVCONNECT_* variable back to a key: single underscores
// stay (rpc_port), double underscores separate levels
// (KVCONNECT_TRANSPORTS__TCP__CONNECTIONS -> transports.tcp.connections).
func keyForEnv(name string) string {
	rest := strings.TrimPrefix(name, "KVCONNECT_")
	return strings.ToLower(strings.ReplaceAll(rest, "__", "."))
}

// closest returns the candidate nearest to s, if near enough to suggest.
func closest(s string, candidates []string) string {
	best, bestD := "", len(s)/2+2
	for _, c := range candidates {
		if d := levenshtein(strings.ToLower(s), strings.ToLower(c)); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

func suggestion(s string, candidates []string) string {
	if c := closest(s, candidates); c != "" {
		return fmt.Sprintf(" (did you mean %q?)", c)
	}
	return ""
}

func levenshtein(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(rb)]
}
