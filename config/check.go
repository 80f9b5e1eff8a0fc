package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"regexp"
	"strings"

	"github.com/kvconnect/kvconnect/errdefs"
	"github.com/kvconnect/kvconnect/internal/pluginpath"
	"github.com/kvconnect/kvconnect/metadata"
	"github.com/kvconnect/kvconnect/transports/names"
	"github.com/kvconnect/kvconnect/units"
)

// checker collects the problems of a converted Config. Validate runs it on
// a Config built in code; Load runs it with origin set, so each problem
// names the value as written and its source, and with loaded set, which
// adds the checks meant for hand-written configuration (typos in
// transport names, a plugin_dir that does not exist).
type checker struct {
	catalog TransportCatalog // nil: the built-in transports
	origin  func(key string) (value any, source string)
	skip    map[string]bool // keys whose value did not convert (already reported)
	loaded  bool
	errs    []*Problem
	warns   []*Problem
}

// add records p, filling in the value as written and its source.
func (ck *checker) add(p *Problem) {
	if ck.origin != nil && p.Source == "" {
		if v, src := ck.origin(p.Key); src != "" {
			if v != nil {
				p.Value = v
			}
			p.Source = src
		}
	}
	maskProblem(p)
	if p.Warning {
		ck.warns = append(ck.warns, p)
	} else {
		ck.errs = append(ck.errs, p)
	}
}

func (ck *checker) ok(key string) bool { return !ck.skip[key] }

// set says whether key was given a value by some layer (a file, the
// environment, a flag), not left to its default; false without origin
// (a Config built in code, whose zero values mean the defaults).
func (ck *checker) set(key string) bool {
	if ck.origin == nil {
		return false
	}
	_, src := ck.origin(key)
	return src != "" && src != "default"
}

// known lists the transports the catalog knows; a name one or two letters
// away from one of these is taken for a typo.
func (ck *checker) known() []string {
	if ck.catalog == nil {
		return names.Builtin()
	}
	return ck.catalog.Names()
}

// transportAllowed says which transport names are allowed.
func (ck *checker) transportAllowed() string {
	return strings.Join(ck.known(), ", ") + ", or the name of an installed transport plugin"
}

func (ck *checker) check(c *Config) {
	if ck.ok("hostname") {
		ck.host("hostname", c.Hostname, false)
	}
	if ck.ok("bind_address") && c.BindAddress != "" {
		ck.host("bind_address", c.BindAddress, false)
	}
	if ck.ok("rpc_port") && (c.RPCPort < 0 || c.RPCPort > 65535) {
		ck.add(&Problem{Key: "rpc_port", Value: c.RPCPort, Allowed: "an integer between 0 and 65535 (0 picks a free port)"})
	}
	if ck.ok("protocol") && (c.Protocol != "" || ck.loaded) {
		ck.transport("protocol", c.Protocol, c.Protocol, c.PluginDir)
	}
	if ck.ok("fallback") {
		ck.fallback(c)
	}
	if ck.ok("metadata") && (c.Metadata != "" || ck.loaded) {
		ck.metadata(c.Metadata)
	}
	if ck.ok("metadata") {
		ck.metadataSettings(c)
	}
	if ck.ok("role") && c.Role != "" && !contains(Roles(), c.Role) {
		ck.add(&Problem{Key: "role", Value: c.Role, Allowed: oneOf(Roles()), Suggestion: closest(c.Role, Roles())})
	}
	if ck.ok("local_device_index") && c.LocalDeviceIndex < 0 {
		ck.add(&Problem{Key: "local_device_index", Value: c.LocalDeviceIndex, Allowed: "a device index, 0 or more"})
	}
	if ck.ok("buffer_device") {
		switch c.BufferDevice {
		case "", "cpu":
		case "cuda", "npu", "xpu":
			// vLLM's default is cuda: a verbatim vLLM config must load.
			ck.add(&Problem{Key: "buffer_device", Value: c.BufferDevice, Warning: true, Err: errdefs.ErrNotSupported,
				Reason: "KV regions are host memory here: registering " + c.BufferDevice + " memory is not supported yet, so the node allocates its KV buffers in host shared memory (stage device tensors through them)"})
		default:
			ck.add(&Problem{Key: "buffer_device", Value: c.BufferDevice,
				Allowed: "cpu (cuda, npu and xpu are not supported yet)", Suggestion: closest(c.BufferDevice, BufferDevices())})
		}
	}
	// A zero written in a file, the environment or a flag would silently
	// mean the default: refused, naming where it came from.
	for _, z := range []struct {
		key     string
		zero    bool
		allowed string
	}{
		{"connect_timeout", c.ConnectTimeout == 0, "a positive duration, e.g. 10s (leave it unset for the default, 10s)"},
		{"plugin_start_timeout", c.PluginStartTimeout == 0, "a positive duration, e.g. 10s (leave it unset for the default, 10s)"},
		{"transfer_timeout", c.TransferTimeout == 0, "a positive duration, e.g. 30s (leave it unset for the default, 30s)"},
		{"metadata_ttl", c.MetadataTTL == 0, "a duration of at least 1s (leave it unset for the default, 10s)"},
		{"max_handshake_frame", c.MaxHandshakeFrame == 0, "at least 4096 bytes (leave it unset for the default, 16MiB)"},
		{"max_handshake_memory", c.MaxHandshakeMemory == 0, "at least twice max_handshake_frame plus 16MiB (leave it unset for the default, 64MiB)"},
	} {
		if z.zero && ck.ok(z.key) && ck.set(z.key) {
			ck.add(&Problem{Key: z.key, Value: "0", Allowed: z.allowed})
		}
	}
	if ck.ok("connect_timeout") && c.ConnectTimeout < 0 {
		ck.add(&Problem{Key: "connect_timeout", Value: c.ConnectTimeout.String(), Allowed: "a duration, not negative"})
	}
	if ck.ok("plugin_start_timeout") && c.PluginStartTimeout < 0 {
		ck.add(&Problem{Key: "plugin_start_timeout", Value: c.PluginStartTimeout.String(), Allowed: "a duration, not negative"})
	}
	if ck.ok("transfer_timeout") && c.TransferTimeout < 0 {
		ck.add(&Problem{Key: "transfer_timeout", Value: c.TransferTimeout.String(), Allowed: "a duration, not negative"})
	}
	frameOK := !(c.MaxHandshakeFrame < 0 || (c.MaxHandshakeFrame > 0 && c.MaxHandshakeFrame < 4096))
	if ck.ok("max_handshake_frame") && !frameOK {
		ck.add(&Problem{Key: "max_handshake_frame", Value: c.MaxHandshakeFrame, Allowed: "at least 4096 bytes"})
	}
	if ck.ok("max_handshake_memory") && ck.ok("max_handshake_frame") && frameOK && c.MaxHandshakeMemory != 0 {
		frame := c.MaxHandshakeFrame
		if frame == 0 {
			frame = DefaultMaxHandshakeFrame
		}
		if least := MinHandshakeMemory(frame); c.MaxHandshakeMemory < least {
			ck.add(&Problem{Key: "max_handshake_memory", Value: units.FormatSize(uint64(max(c.MaxHandshakeMemory, 0))),
				Reason: fmt.Sprintf("too small to receive a frame of max_handshake_frame %s: requests on the RPC port may hold half of what the %s kept for small requests leaves",
					units.FormatSize(uint64(frame)), units.FormatSize(HandshakeSmallReserve)),
				Allowed: fmt.Sprintf("at least %s (twice max_handshake_frame plus %s); raise it with max_handshake_frame", units.FormatSize(uint64(least)), units.FormatSize(HandshakeSmallReserve))})
		}
	}
	if ck.ok("device_name") {
		ck.deviceName(c.DeviceName)
	}
	ck.checkAuth(c, nil)
	if ck.ok("metrics_address") {
		ck.metricsAddress(c.MetricsAddress)
	}
	if ck.ok("plugin_dir") && ck.loaded && c.PluginDir != "" {
		if st, err := os.Stat(c.PluginDir); err != nil || !st.IsDir() {
			ck.add(&Problem{Key: "plugin_dir", Value: c.PluginDir, Warning: true,
				Reason:  "not a directory on this host",
				Allowed: "a directory holding kvconnect-transport-<name> binaries (kvconnect also looks beside its own executable and on $PATH)"})
		}
	}
	ck.transports(c)
}

// host checks a host name or IP address (without a port).
func (ck *checker) host(key, h string, required bool) {
	if h == "" {
		if required {
			ck.add(&Problem{Key: key, Value: h, Reason: "empty", Allowed: "a host name or IP address"})
		}
		return
	}
	if strings.ContainsAny(h, " \t\r\n/\\\"'{}[]@") {
		ck.add(&Problem{Key: key, Value: h, Allowed: "a host name or IP address"})
		return
	}
	if ascendSegment.MatchString(h) {
		ck.add(&Problem{Key: key, Value: h, Reason: "looks like an Ascend segment name host:port:npu_N",
			Allowed: "the host only: the ascend transport builds host:port:npu_N from hostname, transports.ascend.port and transports.ascend.npu_id"})
		return
	}
	if strings.Contains(h, ":") && net.ParseIP(h) == nil {
		ck.add(&Problem{Key: key, Value: h, Reason: "looks like host:port",
			Allowed: "a host name or IP address without a port (the port is rpc_port)"})
	}
}

var ascendSegment = regexp.MustCompile(`^[^:]+:[0-9]+:npu_[0-9]+$`)

// validName says whether s is a well-formed transport name.
func validName(s string) bool {
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return false
		}
	}
	return s != ""
}

// transport checks one transport name (protocol or a fallback entry).
// value is what the problem shows (the whole fallback list for an entry).
func (ck *checker) transport(key, name string, value any, pluginDir string) {
	entry := ""
	if key == "fallback" {
		entry = fmt.Sprintf("entry %q: ", name)
	}
	switch {
	case name == "":
		ck.add(&Problem{Key: key, Value: value, Reason: entry + "empty", Allowed: ck.transportAllowed()})
		return
	case !validName(name):
		ck.add(&Problem{Key: key, Value: value, Reason: entry + "not a transport name (lower-case letters, digits, - and _)",
			Allowed: ck.transportAllowed(), Suggestion: closest(name, ck.known())})
		return
	case contains(ck.known(), name) || !ck.loaded:
		return
	}
	sugg := closest(name, ck.known())
	if pluginpath.Installed(name, pluginDir) {
		return
	}
	bin := pluginpath.BinaryPrefix + name
	if sugg != "" {
		ck.add(&Problem{Key: key, Value: value,
			Reason:  entry + "unknown transport, and no plugin " + bin + " is installed",
			Allowed: ck.transportAllowed(), Suggestion: sugg})
		return
	}
	ck.add(&Problem{Key: key, Value: value, Warning: true,
		Reason: entry + "not a built-in transport, and no plugin " + bin + " was found in plugin_dir, beside kvconnect or on $PATH; starting it will fail",
	})
}

func (ck *checker) fallback(c *Config) {
	seen := map[string]bool{}
	for _, f := range c.Fallback {
		ck.transport("fallback", f, c.Fallback, c.PluginDir)
		switch {
		case f == c.Protocol && f != "":
			ck.add(&Problem{Key: "fallback", Value: c.Fallback, Warning: true,
				Reason: fmt.Sprintf("entry %q is the protocol itself, which is tried first anyway", f)})
		case seen[f]:
			ck.add(&Problem{Key: "fallback", Value: c.Fallback, Warning: true,
				Reason: fmt.Sprintf("entry %q appears more than once; it is tried once", f)})
		}
		seen[f] = true
	}
}

func (ck *checker) metadata(m string) {
	switch {
	case m == MetadataP2P:
		return
	case strings.EqualFold(strings.TrimSpace(m), MetadataP2P):
		ck.add(&Problem{Key: "metadata", Value: m, Allowed: metadata.Allowed, Suggestion: MetadataP2P})
		return
	}
	if _, err := metadata.Parse(m); err != nil {
		p := &Problem{Key: "metadata", Value: m, Reason: metadataReason(err), Allowed: metadata.Allowed}
		if !strings.Contains(m, "://") && !strings.Contains(m, ":") {
			p.Suggestion = closest(m, []string{MetadataP2P})
		}
		ck.add(p)
	}
}

// metadataReason is what is wrong with a connection string (the value
// and what is allowed are the problem's own fields).
func metadataReason(err error) string {
	var pe *metadata.ParseError
	if errors.As(err, &pe) {
		return pe.Reason
	}
	return err.Error()
}

// metadataSettings checks the settings of a metadata service, and warns
// about those that have no effect.
func (ck *checker) metadataSettings(c *Config) {
	if ck.ok("metadata_ttl") && c.MetadataTTL != 0 && c.MetadataTTL < metadata.MinTTL {
		ck.add(&Problem{Key: "metadata_ttl", Value: c.MetadataTTL.String(), Allowed: "a duration of at least 1s"})
	}
	if ck.ok("metadata_redis_db") && c.MetadataRedisDB < 0 {
		ck.add(&Problem{Key: "metadata_redis_db", Value: c.MetadataRedisDB, Allowed: "a database index, 0 or more"})
	}
	p2p := c.Metadata == "" || c.Metadata == MetadataP2P
	target, perr := metadata.Parse(c.Metadata)
	if !p2p && perr != nil {
		return // reported with metadata
	}
	unused := func(key, why string) {
		ck.add(&Problem{Key: key, Warning: true, Reason: "has no effect: " + why})
	}
	set := map[string]bool{
		"metadata_cluster_id": c.MetadataClusterID != "", "metadata_username": c.MetadataUsername != "",
		"metadata_password": c.MetadataPassword != "", "metadata_redis_db": c.MetadataRedisDB != 0,
		"metadata_ca_file": c.MetadataCAFile != "", "metadata_cert_file": c.MetadataCertFile != "",
		"metadata_key_file": c.MetadataKeyFile != "",
	}
	if p2p {
		if ck.loaded {
			for _, k := range sortedKeys(set) {
				if set[k] {
					unused(k, "metadata is P2PHANDSHAKE (no metadata service)")
				}
			}
		}
		return
	}
	tls := c.MetadataCAFile != "" || c.MetadataCertFile != "" || c.MetadataKeyFile != ""
	switch {
	case set["metadata_redis_db"] && target.Backend != metadata.Redis && ck.loaded:
		unused("metadata_redis_db", "metadata is not redis:// or rediss://")
	case target.HasDB && c.MetadataRedisDB != 0 && target.DB != c.MetadataRedisDB:
		ck.add(&Problem{Key: "metadata_redis_db", Value: c.MetadataRedisDB,
			Reason: fmt.Sprintf("the metadata URL names database %d", target.DB), Allowed: "the same database, or only one of the two"})
	}
	if tls && (target.Backend == metadata.Redis || target.Backend == metadata.HTTP) && !target.TLS {
		key := "metadata_ca_file"
		if c.MetadataCAFile == "" {
			key = "metadata_cert_file"
		}
		ck.add(&Problem{Key: key, Reason: "TLS files are set but metadata is " + string(target.Backend) + "://, which is not TLS",
			Allowed: "rediss:// or https:// for TLS, or no TLS files"})
	}
	if target.Backend == metadata.Etcd && c.MetadataPassword != "" && c.MetadataUsername == "" {
		ck.add(&Problem{Key: "metadata_username", Reason: "metadata_password is set without a user name: etcd authenticates a user",
			Allowed: "the etcd user name"})
	}
	if (c.MetadataCertFile == "") != (c.MetadataKeyFile == "") {
		key, other := "metadata_cert_file", "metadata_key_file"
		if c.MetadataCertFile == "" {
			key, other = other, key
		}
		ck.add(&Problem{Key: key, Reason: "set without " + other, Allowed: "a client certificate and its key, both or neither"})
	}
	if ck.loaded {
		for _, k := range []string{"metadata_ca_file", "metadata_cert_file", "metadata_key_file"} {
			path := map[string]string{"metadata_ca_file": c.MetadataCAFile, "metadata_cert_file": c.MetadataCertFile, "metadata_key_file": c.MetadataKeyFile}[k]
			if path == "" || !ck.ok(k) {
				continue
			}
			if f, err := os.Open(path); err != nil {
				ck.add(&Problem{Key: k, Value: path, Reason: "cannot be read: " + err.Error(), Allowed: "a readable PEM file"})
			} else {
				f.Close()
			}
		}
	}
}

// deviceName checks the final device list. A per-device map or a .json
// path left in Config.DeviceName was never resolved: Load resolves it,
// code must call ResolveDeviceName.
func (ck *checker) deviceName(d string) {
	s := strings.TrimSpace(d)
	if s == "" {
		return
	}
	if strings.HasPrefix(s, "{") || strings.HasSuffix(strings.ToLower(s), ".json") {
		ck.add(&Problem{Key: "device_name", Value: d,
			Reason:  "a per-device map must be resolved for this worker's local_device_index first",
			Allowed: "a device name or comma list; pass maps through config.Load, connector.LoadConfig or config.ResolveDeviceName"})
		return
	}
	if _, p := checkDeviceList(s); p != nil {
		p.Key, p.Value = "device_name", d
		ck.add(p)
	}
}

// transports checks the transports.<name>.<option> subtree: names must be
// well formed, values must encode as JSON (they reach the plugin as JSON),
// and, in hand-written configuration, a name close to a built-in one is a
// typo and options for a transport that is never used are worth a warning.
func (ck *checker) transports(c *Config) {
	used := map[string]bool{c.Protocol: true, "tcp": true}
	for _, f := range c.Fallback {
		used[f] = true
	}
	for _, name := range sortedKeys(c.Transports) {
		key := transportsKey + "." + name
		if !validName(name) {
			ck.add(&Problem{Key: key, Reason: "not a transport name (lower-case letters, digits, - and _)",
				Allowed:    "transports.<transport>.<option> with a transport like " + strings.Join(ck.known(), ", "),
				Suggestion: suggestKey(closest(name, ck.known()))})
			continue
		}
		for _, opt := range sortedKeys(c.Transports[name]) {
			okey := key + "." + opt
			if opt == "" {
				ck.add(&Problem{Key: okey, Reason: "empty option name"})
				continue
			}
			if _, err := json.Marshal(c.Transports[name][opt]); err != nil {
				ck.add(&Problem{Key: okey, Reason: "cannot be passed to the transport as JSON: " + err.Error(),
					Allowed: "strings, numbers, booleans, lists and maps with string keys"})
			}
		}
		if !ck.loaded || contains(ck.known(), name) {
			continue
		}
		if sugg := closest(name, ck.known()); sugg != "" {
			ck.add(&Problem{Key: key, Reason: "unknown transport", Allowed: ck.transportAllowed(),
				Suggestion: suggestKey(sugg)})
		} else if !used[name] {
			ck.add(&Problem{Key: key, Warning: true,
				Reason: "options for a transport that is neither the protocol nor in the fallback list"})
		}
	}
}

func suggestKey(name string) string {
	if name == "" {
		return ""
	}
	return transportsKey + "." + name
}
