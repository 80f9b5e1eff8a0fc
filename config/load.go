package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	kjson "github.com/knadh/koanf/parsers/json"
	"github.com/knadh/koanf/parsers/toml/v2"
	"github.com/knadh/koanf/parsers/yaml"
	"github.com/knadh/koanf/providers/file"
	"github.com/knadh/koanf/v2"
	"github.com/spf13/pflag"

	"github.com/kvconnect/kvconnect/internal/units"
	"github.com/kvconnect/kvconnect/plugins"
)

// ErrInvalid is wrapped by every configuration error.
var ErrInvalid = plugins.ErrInvalidArgument

// EnvConfigFile names the config file when --config is not given.
const EnvConfigFile = "KVCONNECT_CONFIG"

// Options says where to load from.
type Options struct {
	// ConfigFile is the --config flag; empty falls back to $KVCONNECT_CONFIG.
	ConfigFile string
	// Environ is the environment (os.Environ() when nil).
	Environ []string
	// Flags holds flags registered by RegisterFlags; only flags the user
	// set count.
	Flags *pflag.FlagSet
}

// Value is one effective setting and where it came from.
type Value struct {
	Key    string `json:"key"`
	Value  any    `json:"value"`
	Source string `json:"source"`
}

// Loaded is the result of Load.
type Loaded struct {
	Config    Config
	LogLevel  string
	LogFormat string
	values    map[string]Value
}

// Values lists every effective setting with its source, sorted by key.
func (l *Loaded) Values() []Value {
	out := make([]Value, 0, len(l.values))
	for _, v := range l.values {
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// Source says where key's effective value came from ("" if unknown key).
func (l *Loaded) Source(key string) string { return l.values[key].Source }

// RegisterFlags adds a flag for every setting that has one, plus --config.
func RegisterFlags(fs *pflag.FlagSet) {
	fs.String("config", "", "config file (YAML, TOML or JSON); default $"+EnvConfigFile)
	for _, s := range settings {
		if s.flag == "" {
			continue
		}
		help := s.help
		if len(s.allowed) > 0 {
			help += " (" + strings.Join(s.allowed, ", ") + ")"
		}
		switch s.kind {
		case kindInt:
			fs.Int(s.flag, int(s.def.(int64)), help)
		default:
			fs.String(s.flag, formatDefaultFlag(s), help)
		}
	}
}

func formatDefaultFlag(s setting) string {
	switch v := s.def.(type) {
	case time.Duration:
		return v.String()
	case string:
		return v
	}
	return fmt.Sprint(s.def)
}

// raw is one layer's flattened key -> value map and its source label.
type layer struct {
	source string
	values map[string]any
	// keySource overrides source per key (env layers name the variable).
	keySource map[string]string
}

// Load reads every layer and returns the effective configuration.
func Load(opts Options) (*Loaded, error) {
	environ := opts.Environ
	if environ == nil {
		environ = os.Environ()
	}
	env := envMap(environ)
	var layers []layer

	defaults := layer{source: "default", values: map[string]any{}}
	for _, s := range settings {
		defaults.values[s.key] = s.def
	}
	layers = append(layers, defaults)

	path := opts.ConfigFile
	pathSource := "flag --config"
	if path == "" && opts.Flags != nil {
		if f := opts.Flags.Lookup("config"); f != nil && f.Changed {
			path = f.Value.String()
		}
	}
	if path == "" {
		path, pathSource = env[EnvConfigFile], "env "+EnvConfigFile
	}
	if path != "" {
		l, err := fileLayer(path, pathSource)
		if err != nil {
			return nil, err
		}
		layers = append(layers, l)
	}

	el, err := envLayer(env)
	if err != nil {
		return nil, err
	}
	layers = append(layers, el)

	if opts.Flags != nil {
		layers = append(layers, flagLayer(opts.Flags))
	}
	return resolve(layers)
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

func fileLayer(path, pathSource string) (layer, error) {
	var parser koanf.Parser
	switch ext := strings.ToLower(filepath.Ext(path)); ext {
	case ".yaml", ".yml":
		parser = yaml.Parser()
	case ".toml":
		parser = toml.Parser()
	case ".json":
		parser = kjson.Parser()
	default:
		return layer{}, fmt.Errorf("config: file %s (from %s): unknown extension %q: use .yaml, .yml, .toml or .json: %w", path, pathSource, ext, ErrInvalid)
	}
	if _, err := os.Stat(path); err != nil {
		return layer{}, fmt.Errorf("config: file %s (from %s): %v: %w", path, pathSource, err, ErrInvalid)
	}
	k := koanf.New(".")
	if err := k.Load(file.Provider(path), parser); err != nil {
		return layer{}, fmt.Errorf("config: file %s: cannot parse: %v: %w", path, err, ErrInvalid)
	}
	src := "file " + filepath.Base(path)
	all := k.All()
	for key := range all {
		if err := checkKnownKey(key, src); err != nil {
			return layer{}, err
		}
	}
	return layer{source: src, values: all}, nil
}

// checkKnownKey rejects keys that are neither settings nor under transports.
func checkKnownKey(key, src string) error {
	if _, ok := lookupSetting(key); ok {
		return nil
	}
	if parts := strings.Split(key, "."); parts[0] == transportsKey {
		if len(parts) < 3 {
			return fmt.Errorf("config: key %s (from %s): transport options go under transports.<transport>.<option>, e.g. transports.tcp.connections: %w", key, src, ErrInvalid)
		}
		return nil
	}
	candidates := make([]string, 0, len(settings))
	for _, s := range settings {
		candidates = append(candidates, s.key)
	}
	return fmt.Errorf("config: unknown key %s (from %s)%s; known keys: %s: %w",
		key, src, suggestion(key, candidates), strings.Join(settingKeys(), ", "), ErrInvalid)
}

// internalEnv are KVCONNECT_ variables that are not settings.
var internalEnv = map[string]bool{
	EnvConfigFile:                true,
	"KVCONNECT_FD_CHANNEL":       true,
	"KVCONNECT_GRPC_MAX_MESSAGE": true,
	"KVCONNECT_PLUGIN_LOG_LEVEL": true,
	"KVCONNECT_TRANSPORT_PLUGIN": true,
}

func envLayer(env map[string]string) (layer, error) {
	l := layer{source: "env", values: map[string]any{}, keySource: map[string]string{}}
	names := make([]string, 0)
	for name := range env {
		if strings.HasPrefix(name, "KVCONNECT_") && !internalEnv[name] {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	for _, name := range names {
		key := keyForEnv(name)
		if err := checkKnownKey(key, "env "+name); err != nil {
			return l, err
		}
		l.values[key] = env[name]
		l.keySource[key] = "env " + name
	}
	return l, nil
}

func flagLayer(fs *pflag.FlagSet) layer {
	l := layer{source: "flag", values: map[string]any{}, keySource: map[string]string{}}
	for _, s := range settings {
		if s.flag == "" {
			continue
		}
		f := fs.Lookup(s.flag)
		if f == nil || !f.Changed {
			continue
		}
		l.values[s.key] = f.Value.String()
		l.keySource[s.key] = "flag --" + s.flag
	}
	return l
}

// resolve merges the layers in order and converts every value.
func resolve(layers []layer) (*Loaded, error) {
	eff := map[string]Value{}
	for _, l := range layers {
		for k, v := range l.values {
			src := l.source
			if s, ok := l.keySource[k]; ok {
				src = s
			}
			eff[k] = Value{Key: k, Value: v, Source: src}
		}
	}
	out := &Loaded{values: map[string]Value{}}
	cfg := &out.Config
	for _, s := range settings {
		v := eff[s.key]
		conv, err := convert(s, v)
		if err != nil {
			return nil, err
		}
		v.Value = conv
		out.values[s.key] = v
		switch s.key {
		case "protocol":
			cfg.Protocol = conv.(string)
		case "device_name":
			cfg.DeviceName = conv.(string)
		case "hostname":
			cfg.Hostname = conv.(string)
		case "rpc_port":
			cfg.RPCPort = int(conv.(int64))
		case "metadata":
			cfg.Metadata = conv.(string)
		case "plugin_dir":
			cfg.PluginDir = conv.(string)
		case "connect_timeout":
			cfg.ConnectTimeout = conv.(time.Duration)
		case "transfer_timeout":
			cfg.TransferTimeout = conv.(time.Duration)
		case "max_handshake_frame":
			cfg.MaxHandshakeFrame = int(conv.(uint64))
		case "log_level":
			out.LogLevel = conv.(string)
		case "log_format":
			out.LogFormat = conv.(string)
		}
	}
	// Transport option subtrees, handed to each transport as JSON.
	for k, v := range eff {
		parts := strings.SplitN(k, ".", 3)
		if parts[0] != transportsKey || len(parts) < 3 {
			continue
		}
		if cfg.Transports == nil {
			cfg.Transports = map[string]map[string]any{}
		}
		if cfg.Transports[parts[1]] == nil {
			cfg.Transports[parts[1]] = map[string]any{}
		}
		cfg.Transports[parts[1]][parts[2]] = jsonable(v.Value)
		out.values[k] = v
	}
	if err := checkValues(out); err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return out, nil
}

// jsonable turns env/flag strings that look like JSON scalars into them,
// so transports.tcp.connections=8 from the environment reaches the
// transport as a number.
func jsonable(v any) any {
	s, ok := v.(string)
	if !ok {
		return v
	}
	var x any
	if err := json.Unmarshal([]byte(s), &x); err == nil {
		switch x.(type) {
		case float64, bool:
			return x
		}
	}
	return s
}

func convert(s setting, v Value) (any, error) {
	bad := func(want string) error {
		msg := fmt.Sprintf("config: %s = %s (from %s): want %s", s.key, show(v.Value), v.Source, want)
		return fmt.Errorf("%s: %w", msg, ErrInvalid)
	}
	switch s.kind {
	case kindString:
		str, ok := v.Value.(string)
		if !ok {
			return nil, bad("a string")
		}
		str = strings.TrimSpace(str)
		if len(s.allowed) > 0 && !contains(s.allowed, str) {
			return nil, bad("one of " + strings.Join(s.allowed, ", ") + suggestion(str, s.allowed))
		}
		return str, nil
	case kindInt:
		var n int64
		switch x := v.Value.(type) {
		case int64:
			n = x
		case int:
			n = int64(x)
		case float64:
			if x != float64(int64(x)) {
				return nil, bad("an integer")
			}
			n = int64(x)
		case string:
			p, err := strconv.ParseInt(strings.TrimSpace(x), 10, 64)
			if err != nil {
				return nil, bad("an integer")
			}
			n = p
		default:
			return nil, bad("an integer")
		}
		if n < s.min || n > s.max {
			return nil, bad(fmt.Sprintf("an integer between %d and %d", s.min, s.max))
		}
		return n, nil
	case kindDuration:
		switch x := v.Value.(type) {
		case time.Duration:
			return x, nil
		case int64, int, float64:
			d, err := units.ParseDuration(fmt.Sprint(x))
			if err != nil {
				return nil, bad("a duration like 30s or a number of seconds")
			}
			return d, nil
		case string:
			d, err := units.ParseDuration(x)
			if err != nil {
				return nil, bad("a duration like 30s, 500ms or a number of seconds")
			}
			return d, nil
		}
		return nil, bad("a duration like 30s")
	case kindSize:
		switch x := v.Value.(type) {
		case uint64:
			return x, nil
		case int64, int, float64:
			n, err := units.ParseSize(strconv.FormatFloat(toFloat(x), 'f', -1, 64))
			if err != nil {
				return nil, bad("a size like 64MiB or a whole number of bytes")
			}
			return n, nil
		case string:
			n, err := units.ParseSize(x)
			if err != nil {
				return nil, bad("a size like 64MiB, 1GB or a whole number of bytes")
			}
			return n, nil
		}
		return nil, bad("a size like 64MiB")
	}
	return nil, errors.New("config: internal: unknown kind")
}

func toFloat(v any) float64 {
	switch x := v.(type) {
	case int64:
		return float64(x)
	case int:
		return float64(x)
	case float64:
		return x
	}
	return 0
}

func show(v any) string {
	if s, ok := v.(string); ok {
		return strconv.Quote(s)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// checkValues checks what the types alone do not, naming each value's
// source.
func checkValues(l *Loaded) error {
	bad := func(key, want string) error {
		v := l.values[key]
		return fmt.Errorf("config: %s = %s (from %s): %s: %w", key, show(v.Value), v.Source, want, ErrInvalid)
	}
	if p := l.Config.Protocol; !validTransportName(p) {
		return bad("protocol", "want a transport name: "+strings.Join(knownTransports, ", ")+" or a plugin's name"+suggestion(p, knownTransports))
	}
	if m := l.Config.Metadata; m != MetadataP2P {
		v := l.values["metadata"]
		return fmt.Errorf("config: metadata = %s (from %s): only %s is supported yet; etcd://, http:// and redis:// metadata services are planned: %w",
			show(v.Value), v.Source, MetadataP2P, plugins.ErrNotSupported)
	}
	if h := l.Config.Hostname; h == "" || strings.ContainsAny(h, " /") {
		return bad("hostname", "want a host name or IP address")
	}
	for name := range l.Config.Transports {
		if !validTransportName(name) {
			return bad("transports."+name, "transport names are lower-case letters, digits, - and _")
		}
	}
	return nil
}

func validTransportName(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}
