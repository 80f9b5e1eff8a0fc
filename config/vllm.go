package config

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"

	kjson "github.com/knadh/koanf/parsers/json"
)

// vllmField maps a vLLM kv_transfer_config field to a kvconnect setting,
// or says why it is ignored.
type vllmField struct {
	key    string // the setting it feeds; "" = ignored
	reason string // why it is ignored
}

// vllmTop are the fields of vLLM's KVTransferConfig.
var vllmTop = map[string]vllmField{
	"kv_connector":              {}, // checked on its own
	"kv_connector_extra_config": {}, // read on its own
	"kv_role":                   {key: "role"},
	"kv_rank":                   {key: "local_device_index"},
	"kv_ip":                     {key: "hostname"},
	"kv_port":                   {key: "rpc_port"},
	"kv_buffer_device":          {key: "buffer_device"},
	"kv_buffer_size":            {key: "buffer_size"},
	"engine_id":                 {key: "engine_id"},
	"kv_parallel_size":          {reason: "kvconnect pairs nodes by host:port, not by a parallel group size"},
	"kv_connector_module_path":  {reason: "kvconnect is not loaded as a Python module"},
	"enable_permute_local_kv":   {reason: "a vLLM-side KV layout option; kvconnect moves bytes as registered"},
	"kv_load_failure_policy":    {reason: "applies inside vLLM (fail or recompute); kvconnect reports every failed op"},
}

// vllmExtra are the kv_connector_extra_config fields MooncakeConnector
// reads.
var vllmExtra = map[string]vllmField{
	"mooncake_protocol":        {key: "protocol"},
	"device_name":              {key: "device_name"},
	"num_workers":              {reason: "kvconnect transports size their own concurrency (see transports.tcp.connections)"},
	"bootstrap_server_address": {reason: "vLLM runs its bootstrap server itself; kvconnect peers are opened by host:port"},
}

// mooncakeConnector matches the kv_connector names kvconnect stands in
// for: MooncakeConnector and its versioned names (MooncakeConnectorV1).
var mooncakeConnector = regexp.MustCompile(`^MooncakeConnector(V[0-9]+)?$`)

const supportedConnectors = "MooncakeConnector (or a versioned name such as MooncakeConnectorV1)"

// vllmLayers reads the kv_transfer_config inputs, lowest first: the
// config file's section, $KVCONNECT_KV_TRANSFER_CONFIG, then
// Options.KVTransferConfig or --kv-transfer-config.
func (ld *loader) vllmLayers(section any, sectionOrigin string) {
	switch s := section.(type) {
	case nil:
	case map[string]any:
		ld.inputs = append(ld.inputs, "kv_transfer_config from "+sectionOrigin)
		ld.vllmLayer(s, sectionOrigin)
	case string:
		ld.vllmText(s, sectionOrigin)
	default:
		ld.problem(&Problem{Key: vllmKey, Value: section, Source: sectionOrigin,
			Allowed: `a map of vLLM kv_transfer_config fields, or a string holding that JSON, @file or a path to a .json file`})
	}
	if v := ld.env[EnvKVTransferConfig]; strings.TrimSpace(v) != "" {
		ld.vllmText(v, "env "+EnvKVTransferConfig)
	}
	switch {
	case ld.opts.KVTransferConfig != "":
		ld.vllmText(ld.opts.KVTransferConfig, "")
	default:
		if f, ok := configFlag(ld.opts.Flags, "kv-transfer-config"); ok && strings.TrimSpace(f.Value.String()) != "" {
			ld.vllmText(f.Value.String(), "flag --kv-transfer-config")
		}
	}
}

// vllmText reads a kv_transfer_config given as JSON text, @file or a
// path. from names where the text came from ("" for Options).
func (ld *loader) vllmText(text, from string) {
	t := strings.TrimSpace(text)
	origin, input := from, "kv_transfer_config"
	if from != "" {
		input += " from " + from
	}
	var b []byte
	if strings.HasPrefix(t, "{") || strings.HasPrefix(t, "[") {
		b = []byte(t)
	} else {
		path := strings.TrimPrefix(t, "@")
		label := from
		if label == "" {
			label = vllmKey
		}
		var err error
		b, err = readLimited(ld.read, path, maxConfigFile)
		if err != nil {
			ld.problem(&Problem{Key: vllmKey, Value: text, Source: label,
				Reason:  "not a JSON object, and cannot read it as a file: " + err.Error(),
				Allowed: `a JSON object like {"kv_connector":"MooncakeConnector","kv_role":"kv_producer"}, @file, or a path to a .json file`})
			return
		}
		origin = "file " + filepath.Base(path)
		input = "kv_transfer_config from " + origin + " (" + path
		if from != "" {
			input += ", named by " + from
		}
		input += ")"
	}
	m, err := parse(b, kjson.Parser())
	if err != nil {
		src := origin
		if src == "" {
			src = vllmKey
		}
		ld.problem(&Problem{Key: vllmKey, Source: src, Reason: parseError(b, "kv_transfer_config JSON", err)})
		return
	}
	ld.inputs = append(ld.inputs, input)
	ld.vllmLayer(m, origin)
}

// vllmLayer maps one kv_transfer_config object onto settings. Unknown
// fields are warnings (vLLM and other connectors add fields kvconnect does
// not know); fields with no meaning for kvconnect are listed as ignored.
func (ld *loader) vllmLayer(m map[string]any, origin string) {
	src := func(field string) string {
		s := vllmKey + " " + field
		if origin != "" {
			s += " in " + origin
		}
		return s
	}
	label := vllmKey
	if origin != "" {
		label += " in " + origin
	}
	l := newLayer()
	switch c := m["kv_connector"].(type) {
	case nil:
		ld.note("%s: kv_connector is not set; read as MooncakeConnector settings", label)
	case string:
		if !mooncakeConnector.MatchString(strings.TrimSpace(c)) {
			ld.problem(&Problem{Key: "kv_connector", Value: c, Source: label,
				Reason:     "kvconnect stands in for vLLM's MooncakeConnector only",
				Allowed:    supportedConnectors,
				Suggestion: closest(c, []string{"MooncakeConnector", "MooncakeConnectorV1"})})
		}
	default:
		ld.problem(&Problem{Key: "kv_connector", Value: c, Source: label, Allowed: supportedConnectors})
	}
	for _, k := range sortedKeys(m) {
		v := m[k]
		if v == nil || k == "kv_connector" {
			continue
		}
		f, known := vllmTop[k]
		switch {
		case k == "kv_connector_extra_config":
			ld.vllmExtra(l, v, src, label)
		case !known && isSecret(k):
			ld.problem(secretInVLLM(k, k, label))
		case !known:
			ld.problem(&Problem{Key: k, Value: v, Source: label, Warning: true,
				Reason:     "not a vLLM kv_transfer_config field kvconnect knows; ignored",
				Suggestion: closest(k, sortedKeys(vllmTop))})
		case f.key != "":
			l.set(f.key, entry{value: v, source: src(k)})
		default:
			ld.ignored = append(ld.ignored, Ignored{Field: k, Value: v, Source: label, Reason: f.reason})
		}
	}
	ld.layers = append(ld.layers, l)
}

func (ld *loader) vllmExtra(l *layer, v any, src func(string) string, label string) {
	const field = "kv_connector_extra_config"
	m, ok := v.(map[string]any)
	if !ok {
		ld.problem(&Problem{Key: field, Value: v, Source: label,
			Allowed: `an object like {"mooncake_protocol":"rdma","device_name":"mlx5_0"}`})
		return
	}
	for _, k := range sortedKeys(m) {
		x := m[k]
		if x == nil {
			continue
		}
		name := field + "." + k
		f, known := vllmExtra[k]
		switch {
		case !known && isSecret(k):
			ld.problem(secretInVLLM(name, k, label))
		case !known:
			ld.problem(&Problem{Key: name, Value: x, Source: label, Warning: true,
				Reason:     "not a MooncakeConnector setting kvconnect knows; ignored",
				Suggestion: prefixed(field+".", closest(k, sortedKeys(vllmExtra)))})
		case f.key != "":
			l.set(f.key, entry{value: x, source: src(name)})
		default:
			ld.ignored = append(ld.ignored, Ignored{Field: name, Value: x, Source: label, Reason: f.reason})
		}
	}
}

// secretInVLLM refuses a kvconnect secret (auth_secret, metadata_password)
// written in kv_transfer_config: that JSON is on vLLM's command line, in
// ps and in its logs, so kvconnect does not read secrets there. Ignoring
// it would run the node without the authentication the user asked for.
func secretInVLLM(name, key, label string) *Problem {
	where := fmt.Sprintf("%s in the environment (%s) or in a kvconnect config file", key, EnvName(key))
	if key == "auth_secret" {
		where = "auth_secret_file (a mode 600 file), or " + where
	}
	return &Problem{Key: name, Value: redactedValue, Source: label,
		Reason:  "kvconnect reads no secret from kv_transfer_config: it is on vLLM's command line, where ps and vLLM's logs show it",
		Allowed: where + "; remove it from kv_transfer_config"}
}

func prefixed(prefix, s string) string {
	if s == "" {
		return ""
	}
	return prefix + s
}

// VLLMFields describes how each vLLM kv_transfer_config field is read,
// for documentation: field -> setting, or "ignored: reason".
func VLLMFields() map[string]string {
	out := map[string]string{"kv_connector": "must be " + supportedConnectors}
	for k, f := range vllmTop {
		if k == "kv_connector" || k == "kv_connector_extra_config" {
			continue
		}
		out[k] = describeField(f)
	}
	for k, f := range vllmExtra {
		out["kv_connector_extra_config."+k] = describeField(f)
	}
	return out
}

func describeField(f vllmField) string {
	if f.key != "" {
		return f.key
	}
	return fmt.Sprintf("ignored: %s", f.reason)
}
