package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	kjson "github.com/knadh/koanf/parsers/json"
	"github.com/knadh/koanf/parsers/toml/v2"
	"github.com/knadh/koanf/parsers/yaml"
	"github.com/knadh/koanf/providers/rawbytes"
	"github.com/knadh/koanf/v2"
	"github.com/kvconnect/kvconnect/auth"
	"github.com/kvconnect/kvconnect/metadata"
	"github.com/kvconnect/kvconnect/transports/names"
	"github.com/spf13/pflag"
)

// maxConfigFile bounds a config file or a kv_transfer_config JSON.
const maxConfigFile = 4 << 20

// Options says where Load reads from. The zero value reads $KVCONNECT_CONFIG,
// $KVCONNECT_KV_TRANSFER_CONFIG and the process environment.
type Options struct {
	// ConfigFile is a kvconnect config file (.yaml, .yml, .toml or .json).
	// Empty: the --config flag in Flags, then $KVCONNECT_CONFIG.
	ConfigFile string
	// ConfigFileSource names where ConfigFile came from, in problems
	// about the file itself (a path that cannot be read): "argument" for
	// a command's argument. Default "Options.ConfigFile".
	ConfigFileSource string
	// KVTransferConfig is a vLLM kv_transfer_config: JSON text, @file, or
	// a path to a .json file. Empty: the --kv-transfer-config flag in
	// Flags. $KVCONNECT_KV_TRANSFER_CONFIG and a kv_transfer_config
	// section in the config file are read too (below this one).
	KVTransferConfig string
	// Base is a configuration built in code. Its non-zero fields (and a
	// non-nil Fallback) form a layer just above the defaults, with source
	// "code"; the file, kv_transfer_config, environment and flags override
	// it.
	Base *Config
	// Environ is the environment as KEY=VALUE strings. nil reads the
	// process environment (os.Environ()); a non-nil empty slice reads none.
	Environ []string
	// Flags holds the flags registered by RegisterFlags; only flags the
	// user set count.
	Flags *pflag.FlagSet
	// CallerEnv names environment variables the caller reads itself (the
	// C library: MC_MIN_RPC_PORT and MC_MAX_RPC_PORT): Load does not warn
	// that kvconnect leaves them unread, as it does for the other Mooncake
	// Transfer Engine variables it has no counterpart for.
	CallerEnv []string
	// Catalog names the transports that are known (a name close to one of
	// them is a typo); nil means the built-in transports (names.Builtin).
	// A *transports.Catalog is one.
	Catalog TransportCatalog
}

// TransportCatalog is what configuration needs to know of the transports:
// their names. *transports.Catalog implements it; configuration takes the
// interface so that it links no transport and no plugin launcher.
type TransportCatalog interface {
	// Names lists the known transports.
	Names() []string
}

// Value is one effective setting and where it came from.
type Value struct {
	Key string `json:"key"`
	// Value is the effective value: a string, int, uint64 (sizes), a
	// duration as a string ("30s"), a []string, or a transport option as
	// written. nil for fallback when it is not set (the default chain).
	Value any `json:"value"`
	// Source is "default", "code", "file kvconnect.yaml", "kv_transfer_config
	// kv_role in file vllm.json", "env MOONCAKE_PROTOCOL" or "flag --protocol".
	Source string `json:"source"`
	// Raw is the value as written when the effective value was derived
	// from it: a per-device device_name map or .json path.
	Raw any `json:"raw,omitempty"`
}

// Ignored is a vLLM kv_transfer_config field that was accepted but has no
// meaning for kvconnect.
type Ignored struct {
	Field  string `json:"field"`
	Value  any    `json:"value"`
	Source string `json:"source"`
	Reason string `json:"reason"`
}

// Loaded is the result of Load.
type Loaded struct {
	// Config is the effective configuration, defaults filled in.
	Config Config
	// LogLevel and LogFormat are the log_level and log_format settings.
	LogLevel  string
	LogFormat string
	// Inputs lists what was read, in layer order ("file kvconnect.yaml",
	// "kv_transfer_config from flag --kv-transfer-config", ...).
	Inputs []string
	// Notes say how conflicts were resolved ("MC_FORCE_TCP=1 forces
	// protocol tcp (was rdma from file kvconnect.yaml)").
	Notes []string
	// Warnings are problems that do not stop loading.
	Warnings []*Problem
	// Ignored lists vLLM fields accepted but unused.
	Ignored []Ignored

	values map[string]Value
}

// Values lists every effective setting with its source, sorted by key;
// transport options appear as transports.<name>.<option>.
func (l *Loaded) Values() []Value {
	out := make([]Value, 0, len(l.values))
	for _, v := range l.values {
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// Value returns the effective setting key and whether it exists.
func (l *Loaded) Value(key string) (Value, bool) {
	v, ok := l.values[key]
	return v, ok
}

// Source says where key's effective value came from ("" if unknown key).
func (l *Loaded) Source(key string) string { return l.values[key].Source }

// entry is one value as written in one layer.
type entry struct {
	value  any
	source string
	text   bool // from the environment or a flag: transport options read JSON scalars
	conv   any  // converted value (settings only)
	bad    bool // conversion failed (already reported)
	// redisOnly marks a Mooncake variable read only for a Redis metadata
	// service (MC_REDIS_PASSWORD, ...).
	redisOnly bool
}

// layer is one input's flattened key -> value map, in the order written.
type layer struct {
	entries map[string]entry
	order   []string
}

func newLayer() *layer { return &layer{entries: map[string]entry{}} }

func (l *layer) set(key string, e entry) {
	if s, ok := lookupSetting(key); ok && s.kind == kindSecret {
		if str, isStr := e.value.(string); isStr {
			e.value = auth.Secret(str) // never shown, from here on
		}
	}
	if _, ok := l.entries[key]; !ok {
		l.order = append(l.order, key)
	}
	l.entries[key] = e
}

// loader carries one Load.
type loader struct {
	opts    Options
	env     map[string]string
	read    func(string) ([]byte, error) // nil: readFile
	layers  []*layer
	errs    []*Problem
	warns   []*Problem
	notes   []string
	ignored []Ignored
	inputs  []string

	forceTCP    *entry // MC_FORCE_TCP set true
	ascendIndex string // source label when transports.ascend.npu_id follows local_device_index
}

// Load reads every layer and returns the effective configuration. The
// error joins every *Problem found (see Problems); warnings, notes and
// ignored vLLM fields are in the Loaded, which Load returns even with an
// error so callers can show what was understood (its Config is not valid
// then).
func Load(opts Options) (*Loaded, error) {
	return newLoader(opts, nil).load()
}

func newLoader(opts Options, read func(string) ([]byte, error)) *loader {
	environ := opts.Environ
	if environ == nil {
		environ = os.Environ()
	}
	return &loader{opts: opts, env: envMap(environ), read: read}
}

func envMap(environ []string) map[string]string {
	m := make(map[string]string, len(environ))
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return m
}

func (ld *loader) problem(p *Problem) {
	maskProblem(p)
	if p.Warning {
		ld.warns = append(ld.warns, p)
	} else {
		ld.errs = append(ld.errs, p)
	}
}

func (ld *loader) note(format string, args ...any) {
	ld.notes = append(ld.notes, fmt.Sprintf(format, args...))
}

func (ld *loader) load() (*Loaded, error) {
	ld.defaultsLayer()
	if ld.opts.Base != nil {
		ld.codeLayer(*ld.opts.Base)
	}
	section, sectionOrigin := ld.fileLayer()
	ld.vllmLayers(section, sectionOrigin)
	ld.envLayer()
	ld.flagLayer()
	return ld.resolve()
}

func (ld *loader) defaultsLayer() {
	l := newLayer()
	for _, s := range settings {
		if s.def != nil {
			l.set(s.key, entry{value: s.def, source: "default"})
		}
	}
	ld.layers = append(ld.layers, l)
}

// codeLayer turns a Config built in code into a layer of its non-zero
// fields.
func (ld *loader) codeLayer(c Config) {
	l := newLayer()
	add := func(key string, v any, set bool) {
		if set {
			l.set(key, entry{value: v, source: "code"})
		}
	}
	add("protocol", c.Protocol, c.Protocol != "")
	add("fallback", c.Fallback, c.Fallback != nil)
	add("device_name", c.DeviceName, c.DeviceName != "")
	add("hostname", c.Hostname, c.Hostname != "")
	add("bind_address", c.BindAddress, c.BindAddress != "")
	add("rpc_port", c.RPCPort, c.RPCPort != 0)
	add("metadata", c.Metadata, c.Metadata != "")
	add("metadata_cluster_id", c.MetadataClusterID, c.MetadataClusterID != "")
	add("metadata_ttl", c.MetadataTTL, c.MetadataTTL != 0)
	add("metadata_username", c.MetadataUsername, c.MetadataUsername != "")
	add("metadata_password", string(c.MetadataPassword), c.MetadataPassword != "")
	add("metadata_redis_db", c.MetadataRedisDB, c.MetadataRedisDB != 0)
	add("metadata_ca_file", c.MetadataCAFile, c.MetadataCAFile != "")
	add("metadata_cert_file", c.MetadataCertFile, c.MetadataCertFile != "")
	add("metadata_key_file", c.MetadataKeyFile, c.MetadataKeyFile != "")
	add("role", c.Role, c.Role != "")
	add("engine_id", c.EngineID, c.EngineID != "")
	add("local_device_index", c.LocalDeviceIndex, c.LocalDeviceIndex != 0)
	add("buffer_size", c.BufferSize, c.BufferSize != 0)
	add("buffer_device", c.BufferDevice, c.BufferDevice != "")
	add("connect_timeout", c.ConnectTimeout, c.ConnectTimeout != 0)
	add("plugin_start_timeout", c.PluginStartTimeout, c.PluginStartTimeout != 0)
	add("transfer_timeout", c.TransferTimeout, c.TransferTimeout != 0)
	add("max_handshake_frame", c.MaxHandshakeFrame, c.MaxHandshakeFrame != 0)
	add("max_handshake_memory", c.MaxHandshakeMemory, c.MaxHandshakeMemory != 0)
	add("plugin_dir", c.PluginDir, c.PluginDir != "")
	if c.MooncakeInterop != nil {
		add("mooncake_interop", *c.MooncakeInterop, true)
	}
	add("auth_secret", c.AuthSecret, c.AuthSecret != "")
	add("auth_secret_file", c.AuthSecretFile, c.AuthSecretFile != "")
	add("metrics_address", c.MetricsAddress, c.MetricsAddress != "")
	add("metrics_peer_labels", c.MetricsPeerLabels, c.MetricsPeerLabels)
	for _, name := range sortedKeys(c.Transports) {
		for _, opt := range sortedKeys(c.Transports[name]) {
			add(transportsKey+"."+name+"."+opt, c.Transports[name][opt], true)
		}
	}
	ld.inputs = append(ld.inputs, "code (Options.Base)")
	ld.layers = append(ld.layers, l)
}

// configPath finds the config file: Options.ConfigFile, --config, then
// $KVCONNECT_CONFIG.
func (ld *loader) configPath() (string, string) {
	if ld.opts.ConfigFile != "" {
		if ld.opts.ConfigFileSource != "" {
			return ld.opts.ConfigFile, ld.opts.ConfigFileSource
		}
		return ld.opts.ConfigFile, "Options.ConfigFile"
	}
	if f, ok := configFlag(ld.opts.Flags, "config"); ok && f.Value.String() != "" {
		return f.Value.String(), "flag --config"
	}
	if p := ld.env[EnvConfigFile]; p != "" {
		return p, "env " + EnvConfigFile
	}
	return "", ""
}

// parserFor picks the koanf parser by file extension.
func parserFor(path string) (koanf.Parser, string) {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".yaml", ".yml":
		return yaml.Parser(), "YAML"
	case ".toml":
		return toml.Parser(), "TOML"
	case ".json":
		return kjson.Parser(), "JSON"
	}
	return nil, ""
}

// parse loads bytes with a koanf parser into a nested map. A panic in a
// parser on hostile input becomes an error.
func parse(b []byte, parser koanf.Parser) (m map[string]any, err error) {
	defer func() {
		if r := recover(); r != nil {
			m, err = nil, fmt.Errorf("the parser failed on this input: %v", r)
		}
	}()
	k := koanf.New(".")
	if err := k.Load(rawbytes.Provider(b), parser); err != nil {
		return nil, err
	}
	return k.Raw(), nil
}

// parseError describes a parse error, with line and column for JSON.
func parseError(b []byte, what string, err error) string {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		line, col := lineCol(b, se.Offset)
		return fmt.Sprintf("cannot parse %s: line %d column %d: %v", what, line, col, err)
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fmt.Sprintf("cannot parse %s: the top level must be an object (a map of keys), not %s", what, te.Value)
	}
	return fmt.Sprintf("cannot parse %s: %v", what, err)
}

func lineCol(b []byte, off int64) (int, int) {
	line, col := 1, 1
	for i := int64(0); i < off && i < int64(len(b)); i++ {
		if b[i] == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
	}
	return line, col
}

// fileLayer reads the kvconnect config file. It returns its
// kv_transfer_config section, if any, for the vLLM layer.
func (ld *loader) fileLayer() (any, string) {
	path, pathSource := ld.configPath()
	if path == "" {
		return nil, ""
	}
	parser, format := parserFor(path)
	if parser == nil {
		ld.problem(&Problem{Key: "config", Value: path, Source: pathSource,
			Reason:  fmt.Sprintf("unknown file extension %q", filepath.Ext(path)),
			Allowed: "a .yaml, .yml, .toml or .json file"})
		return nil, ""
	}
	b, err := readLimited(ld.read, path, maxConfigFile)
	if err != nil {
		ld.problem(&Problem{Key: "config", Value: path, Source: pathSource, Reason: "cannot read the file: " + err.Error()})
		return nil, ""
	}
	src := "file " + filepath.Base(path)
	ld.inputs = append(ld.inputs, src+" ("+path+", from "+pathSource+")")
	raw, err := parse(b, parser)
	if err != nil {
		ld.problem(&Problem{Source: src, Reason: parseError(b, format, err)})
		return nil, ""
	}
	l := newLayer()
	var section any
	for _, k := range sortedKeys(raw) {
		v := raw[k]
		if v == nil {
			continue // key: with no value, or null: not set
		}
		switch {
		case k == transportsKey:
			ld.walkTransports(l, v, src)
		case k == vllmKey:
			section = v
		default:
			if _, ok := lookupSetting(k); ok {
				l.set(k, entry{value: v, source: src})
				continue
			}
			if _, _, ok := optionKey(k); ok { // a dotted key: transports.tcp.connections: 4
				l.set(k, entry{value: v, source: src})
				continue
			}
			ld.problem(unknownFileKey(k, src))
		}
	}
	ld.layers = append(ld.layers, l)
	return section, src
}

// unknownFileKey explains an unknown key in a kvconnect file.
func unknownFileKey(k, src string) *Problem {
	p := &Problem{Key: k, Source: src, Reason: "unknown key",
		Allowed: "one of " + strings.Join(fileKeys(), ", ")}
	switch f, isVLLM := vllmTop[k]; {
	case isVLLM || k == "kv_connector":
		p.Reason = "unknown key: " + k + " is a vLLM kv_transfer_config field; put it under kv_transfer_config"
		p.Suggestion = f.key
		if p.Suggestion == "" {
			p.Suggestion = vllmKey + "." + k
		}
	case contains(names.Builtin(), k):
		p.Reason = "unknown key: transport options go under transports." + k
		p.Suggestion = transportsKey + "." + k
	default:
		if p.Suggestion = closest(k, fileKeys()); p.Suggestion != "" {
			p.Allowed = ""
		}
	}
	return p
}

// walkTransports flattens transports.<name>.<option>.
func (ld *loader) walkTransports(l *layer, v any, src string) {
	m, ok := v.(map[string]any)
	if !ok {
		ld.problem(&Problem{Key: transportsKey, Value: v, Source: src,
			Allowed: "a map of transport name to its options, e.g. transports: {tcp: {connections: 4}}"})
		return
	}
	for _, name := range sortedKeys(m) {
		switch opts := m[name].(type) {
		case nil:
		case map[string]any:
			for _, opt := range sortedKeys(opts) {
				if opts[opt] == nil {
					continue
				}
				l.set(transportsKey+"."+name+"."+opt, entry{value: opts[opt], source: src})
			}
		default:
			ld.problem(&Problem{Key: transportsKey + "." + name, Value: opts, Source: src,
				Allowed: "a map of options, e.g. transports." + name + ".connections: 4"})
		}
	}
}

// optionKey splits transports.<name>.<option>; ok is false for anything
// else.
func optionKey(key string) (name, opt string, ok bool) {
	parts := strings.SplitN(key, ".", 3)
	if len(parts) != 3 || parts[0] != transportsKey {
		return "", "", false
	}
	return parts[1], parts[2], true
}

// resolve turns the layers into the effective configuration, one step
// after another: merge the layers (later wins), apply MC_FORCE_TCP, fill
// in the Config, turn Mooncake interop off under auth, resolve
// device_name, collect the transport options, record every value's
// source, and check the result.
func (ld *loader) resolve() (*Loaded, error) {
	r := &resolution{eff: ld.merge(), skip: map[string]bool{}, out: &Loaded{values: map[string]Value{}}}
	ld.forceTCPStep(r.eff)
	r.fill(ld.layers[0])
	ld.authStep(r)
	ld.deviceStep(r)
	ld.transportsStep(r)
	r.record()
	ld.checkStep(r)

	out := r.out
	out.Inputs, out.Notes, out.Warnings, out.Ignored = ld.inputs, ld.notes, ld.warns, ld.ignored
	out.Config.Notes = append([]string(nil), ld.notes...)
	return out, joinProblems(ld.errs)
}

// resolution is what resolve's steps share.
type resolution struct {
	eff    map[string]entry // effective entry per key
	skip   map[string]bool  // keys whose value did not convert (already reported)
	out    *Loaded
	devRaw any // device_name as written, when it was resolved to something else
}

// merge converts every layer's values and merges them, later layers
// winning. Mooncake's Redis-only variables are dropped, with a note, when
// metadata is not a Redis service.
func (ld *loader) merge() map[string]entry {
	eff := map[string]entry{}
	redis, metaSource := ld.redisMetadata()
	for _, l := range ld.layers {
		for _, k := range l.order {
			e := l.entries[k]
			if e.redisOnly && !redis {
				ld.note("%s is ignored: metadata is not redis:// or rediss:// (from %s); Mooncake reads it only for Redis",
					strings.TrimPrefix(e.source, "env "), metaSource)
				continue
			}
			if s, ok := lookupSetting(k); ok {
				conv, p := convert(s, e)
				if p != nil {
					ld.problem(p)
					e.bad = true
				}
				e.conv = conv
			}
			eff[k] = e
		}
	}
	return eff
}

// forceTCPStep applies MC_FORCE_TCP after every layer, flags included, as
// Mooncake does.
func (ld *loader) forceTCPStep(eff map[string]entry) {
	if ld.forceTCP == nil {
		return
	}
	prev := eff["protocol"]
	e := entry{value: "tcp", source: ld.forceTCP.source, conv: "tcp"}
	if prev.bad || prev.conv != "tcp" {
		ld.note("%s=%s forces protocol tcp (was %s from %s), as Mooncake does",
			strings.TrimPrefix(ld.forceTCP.source, "env "), ld.forceTCP.value, showValue(prev.value), prev.source)
	}
	eff["protocol"] = e
}

// get returns key's converted effective value; a value that did not
// convert is marked skipped and stands in for by its default.
func (r *resolution) get(defaults *layer, key string) any {
	e := r.eff[key]
	if e.bad {
		r.skip[key] = true
		return defaults.entries[key].conv
	}
	return e.conv
}

// fill sets the Config's fields (and the log settings) from the
// effective values.
func (r *resolution) fill(defaults *layer) {
	cfg := &r.out.Config
	get := func(key string) any { return r.get(defaults, key) }
	str := func(key string) string { s, _ := get(key).(string); return s }
	num := func(key string) int { n, _ := get(key).(int64); return int(n) }
	dur := func(key string) time.Duration { d, _ := get(key).(time.Duration); return d }
	size := func(key string) uint64 { n, _ := get(key).(uint64); return n }
	boolean := func(key string) *bool {
		if b, ok := get(key).(bool); ok {
			return Bool(b)
		}
		return nil
	}

	cfg.Protocol = str("protocol")
	if l, ok := get("fallback").([]string); ok {
		cfg.Fallback = l
	}
	cfg.Hostname = str("hostname")
	cfg.BindAddress = str("bind_address")
	cfg.RPCPort = num("rpc_port")
	cfg.Metadata = str("metadata")
	cfg.MetadataClusterID = str("metadata_cluster_id")
	cfg.MetadataTTL = dur("metadata_ttl")
	cfg.MetadataUsername = str("metadata_username")
	cfg.MetadataPassword = metadata.Secret(str("metadata_password"))
	cfg.MetadataRedisDB = num("metadata_redis_db")
	cfg.MetadataCAFile = str("metadata_ca_file")
	cfg.MetadataCertFile = str("metadata_cert_file")
	cfg.MetadataKeyFile = str("metadata_key_file")
	cfg.Role = str("role")
	cfg.EngineID = str("engine_id")
	cfg.LocalDeviceIndex = num("local_device_index")
	cfg.BufferSize = size("buffer_size")
	cfg.BufferDevice = str("buffer_device")
	cfg.ConnectTimeout = dur("connect_timeout")
	cfg.PluginStartTimeout = dur("plugin_start_timeout")
	cfg.TransferTimeout = dur("transfer_timeout")
	cfg.MaxHandshakeFrame = int(min(size("max_handshake_frame"), 1<<40))
	cfg.MaxHandshakeMemory = int(min(size("max_handshake_memory"), 1<<42))
	cfg.PluginDir = str("plugin_dir")
	cfg.MooncakeInterop = boolean("mooncake_interop")
	if s, ok := get("auth_secret").(auth.Secret); ok {
		cfg.AuthSecret = s
	}
	cfg.AuthSecretFile = str("auth_secret_file")
	cfg.MetricsAddress = str("metrics_address")
	if b := boolean("metrics_peer_labels"); b != nil {
		cfg.MetricsPeerLabels = *b
	}
	r.out.LogLevel = str("log_level")
	r.out.LogFormat = str("log_format")
}

// authStep turns Mooncake interop off when auth is on, unless the user
// asked for it (which the checker refuses): Mooncake peers cannot
// authenticate.
func (ld *loader) authStep(r *resolution) {
	cfg := &r.out.Config
	if cfg.AuthSecret == "" && cfg.AuthSecretFile == "" {
		return
	}
	if e := r.eff["mooncake_interop"]; e.source == "default" || e.source == "" {
		cfg.MooncakeInterop = Bool(false)
		e.conv, e.value, e.source = false, false, "auth ("+authSource(r.eff)+")"
		r.eff["mooncake_interop"] = e
		ld.note("mooncake_interop is off: auth is on (from %s) and Mooncake peers cannot authenticate", authSource(r.eff))
	}
}

// deviceStep resolves a per-device device_name map for
// local_device_index.
func (ld *loader) deviceStep(r *resolution) {
	cfg := &r.out.Config
	dev := r.get(ld.layers[0], "device_name")
	if dev == nil || r.skip["device_name"] || r.skip["local_device_index"] {
		return
	}
	final, p := resolveDevice(dev, cfg.LocalDeviceIndex, r.eff["local_device_index"].source, ld.read)
	if p != nil {
		e := r.eff["device_name"]
		p.Key, p.Source = "device_name", e.source
		if p.Value == nil {
			p.Value = e.value
		}
		ld.problem(p)
		r.skip["device_name"] = true
		return
	}
	cfg.DeviceName = final
	if s, ok := dev.(string); !ok || strings.TrimSpace(s) != final {
		r.devRaw = r.eff["device_name"].value
	}
}

// transportsStep collects transports.<name>.<option>, handed to each
// transport as JSON; an ascend npu_id that follows local_device_index
// takes its value now.
func (ld *loader) transportsStep(r *resolution) {
	cfg := &r.out.Config
	if ld.ascendIndex != "" {
		if e, ok := r.eff["transports.ascend.npu_id"]; ok && isDeferredIndex(e.value) {
			e.value = cfg.LocalDeviceIndex
			e.source = ld.ascendIndex + " (local_device_index from " + r.eff["local_device_index"].source + ")"
			r.eff["transports.ascend.npu_id"] = e
		}
	}
	for _, k := range sortedKeys(r.eff) {
		name, opt, ok := optionKey(k)
		if !ok {
			continue
		}
		e := r.eff[k]
		v := e.value
		if s, isStr := v.(string); isStr && e.text {
			v = jsonable(s)
		}
		if cfg.Transports == nil {
			cfg.Transports = map[string]map[string]any{}
		}
		if cfg.Transports[name] == nil {
			cfg.Transports[name] = map[string]any{}
		}
		cfg.Transports[name][opt] = v
		r.out.values[k] = Value{Key: k, Value: v, Source: e.source}
	}
}

// record notes every setting's effective value and source, secrets
// hidden, for Loaded.Values.
func (r *resolution) record() {
	for _, s := range settings {
		e := r.eff[s.key]
		v := Value{Key: s.key, Value: display(e.conv), Source: e.source}
		if e.bad {
			v.Value = e.value
		}
		if s.key == "device_name" && !r.skip["device_name"] {
			v.Value = r.out.Config.DeviceName
			v.Raw = r.devRaw
		}
		if v.Source == "" {
			v.Source = "default"
		}
		if s.secret && v.Value != nil && v.Value != "" {
			v.Value = hidden
		}
		if m, ok := v.Value.(string); ok && s.key == "metadata" {
			v.Value = metadata.Redact(m)
		}
		r.out.values[s.key] = v
	}
}

// checkStep runs the checker on the result, each problem naming the
// value as written and its source.
func (ld *loader) checkStep(r *resolution) {
	ck := &checker{catalog: ld.opts.Catalog, loaded: true, skip: r.skip, origin: func(key string) (any, string) {
		if e, ok := r.eff[key]; ok {
			return e.value, e.source
		}
		// transports.<name>: the source of its first option
		prefix := key + "."
		for _, k := range sortedKeys(r.eff) {
			if strings.HasPrefix(k, prefix) {
				return nil, r.eff[k].source
			}
		}
		return nil, ""
	}}
	ck.check(&r.out.Config)
	ld.errs = append(ld.errs, ck.errs...)
	ld.warns = append(ld.warns, ck.warns...)
}

// redisMetadata says whether the metadata setting, as the layers leave
// it, names a Redis service, and where it came from.
func (ld *loader) redisMetadata() (bool, string) {
	var last entry
	found := false
	for _, l := range ld.layers {
		if e, ok := l.entries["metadata"]; ok {
			last, found = e, true
		}
	}
	if !found {
		return false, "default"
	}
	str, _ := scalarString(last.value)
	str = strings.ToLower(strings.TrimSpace(str))
	return strings.HasPrefix(str, "redis://") || strings.HasPrefix(str, "rediss://"), last.source
}

// looksSecret says whether a key, known or not, may hold a secret: a
// secret setting, one nested under another name
// (kv_connector_extra_config.auth_secret), or a name that says so.
func looksSecret(key string) bool {
	last := key[strings.LastIndexByte(key, '.')+1:]
	if isSecret(key) || isSecret(last) {
		return true
	}
	if _, known := lookupSetting(last); !known && closest(last, secretKeys) != "" { // a typo of one (auth_secert)
		return true
	}
	l := strings.ToLower(last)
	for _, w := range []string{"secret", "password", "passwd", "token", "credential"} {
		if strings.Contains(l, w) {
			return true
		}
	}
	return false
}

// secretKeys are the settings whose values are never shown.
var secretKeys = func() []string {
	var out []string
	for _, s := range settings {
		if s.secret || s.kind == kindSecret {
			out = append(out, s.key)
		}
	}
	return out
}()

// maskProblem hides a secret value a problem would show, and the
// password of a metadata URL.
func maskProblem(p *Problem) {
	switch {
	case p.Value != nil && (looksSecret(p.Key) || p.Suggestion != "" && looksSecret(p.Suggestion)):
		p.Value = hidden
	case p.Key == "metadata":
		if s, ok := p.Value.(string); ok {
			p.Value = metadata.Redact(s)
		}
	}
}
