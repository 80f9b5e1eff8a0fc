package config

import (
	"strings"

	"github.com/spf13/pflag"
)

// RegisterFlags adds the config flags to fs: --config,
// --kv-transfer-config, --set KEY=VALUE (repeatable, any key including
// transports.<name>.<option>), and one flag per setting (--protocol,
// --rpc-port, ...). Every command of the kvconnect CLI takes them.
//
// Each flag is marked as a config flag; Load reads only marked flags, so a
// command's own flag that happens to share a name (bench --buffer-size)
// is not taken for a setting.
func RegisterFlags(fs *pflag.FlagSet) {
	mark := func(name string) { _ = fs.SetAnnotation(name, flagAnnotation, []string{"true"}) }
	fs.String("config", "", "config file (YAML, TOML or JSON, by extension); default $"+EnvConfigFile)
	fs.String("kv-transfer-config", "", `vLLM kv_transfer_config: JSON, @file or a path to a .json file; default $`+EnvKVTransferConfig)
	fs.StringArray("set", nil, "set any key, e.g. --set transports.tcp.connections=8 (repeatable)")
	mark("config")
	mark("kv-transfer-config")
	mark("set")
	for _, s := range settings {
		if s.flag == "" {
			continue
		}
		help := s.help + "; env " + EnvName(s.key)
		def := ""
		if s.def != nil {
			def = showDefault(s.def)
		}
		fs.String(s.flag, def, help)
		mark(s.flag)
	}
}

// flagAnnotation marks the flags RegisterFlags adds.
const flagAnnotation = "kvconnect-config"

// configFlag returns the config flag name from fs if the user set it.
func configFlag(fs *pflag.FlagSet, name string) (*pflag.Flag, bool) {
	if fs == nil {
		return nil, false
	}
	f := fs.Lookup(name)
	if f == nil || !f.Changed || f.Annotations[flagAnnotation] == nil {
		return nil, false
	}
	return f, true
}

func showDefault(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	return showValue(v)
}

// flagLayer reads the setting flags the user set, then every --set.
func (ld *loader) flagLayer() {
	fs := ld.opts.Flags
	if fs == nil {
		return
	}
	l := newLayer()
	for _, s := range settings {
		if s.flag == "" {
			continue
		}
		f, ok := configFlag(fs, s.flag)
		if !ok {
			continue
		}
		l.set(s.key, entry{value: f.Value.String(), source: "flag --" + s.flag, text: true})
	}
	if _, ok := configFlag(fs, "set"); ok {
		sets, _ := fs.GetStringArray("set")
		for _, kv := range sets {
			k, v, ok := strings.Cut(kv, "=")
			k = strings.TrimSpace(k)
			src := "flag --set " + k
			_, isSetting := lookupSetting(k)
			_, _, isOption := optionKey(k)
			switch {
			case !ok:
				ld.problem(&Problem{Key: "set", Value: kv, Source: "flag --set",
					Reason: "not KEY=VALUE", Allowed: "KEY=VALUE, e.g. --set transports.tcp.connections=8"})
			case isSetting || isOption:
				l.set(k, entry{value: v, source: src, text: true})
			default:
				ld.problem(&Problem{Key: k, Value: v, Source: src, Reason: "unknown key",
					Allowed:    "a setting (" + strings.Join(SettingKeys(), ", ") + ")",
					Suggestion: closest(k, fileKeys())})
			}
		}
	}
	ld.layers = append(ld.layers, l)
}
