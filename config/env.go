package config

import (
	"bufio"
	"bytes"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/kvconnect/kvconnect/metadata"
)

// deferredIndex marks transports.ascend.npu_id as "the local device
// index", known only once every layer is read.
type deferredIndex struct{}

func isDeferredIndex(v any) bool {
	_, ok := v.(deferredIndex)
	return ok
}

const boolAllowed = "true or false (1/0, yes/no, on/off)"

// envLayer reads the SGLang / Mooncake variables, then KVCONNECT_*, which
// win over them. MC_FORCE_TCP is kept aside and applied after the flags.
func (ld *loader) envLayer() {
	l := newLayer()
	get := func(name string) (string, bool) {
		v, ok := ld.env[name]
		if !ok {
			return "", false
		}
		if strings.TrimSpace(v) == "" {
			// An empty variable counts as unset, but for the secret:
			// KVCONNECT_AUTH_SECRET="$(cat /missing)" is a secret that
			// failed to load, and must not read as "auth off".
			if k := keyForEnv(name); strings.HasPrefix(name, envPrefix) && (k == "auth_secret" || k == "auth_secret_file") {
				return v, true
			}
			return "", false
		}
		return v, true
	}
	set := func(key, name string, v any) {
		l.set(key, entry{value: v, source: "env " + name, text: true})
	}
	for _, ce := range CompatEnvs() {
		v, ok := get(ce.Name)
		if !ok {
			continue
		}
		switch ce.Name {
		case "ENABLE_ASCEND_TRANSFER_WITH_MOONCAKE":
			ld.ascendEnv(l, v, get)
		case "ASCEND_NPU_PHY_ID":
			// read with ENABLE_ASCEND_TRANSFER_WITH_MOONCAKE
		case "MC_FORCE_HCA":
			// Mooncake: fail rather than fall back to TCP when its RDMA
			// devices are missing; here, no fallback from the protocol.
			on, valid := parseBool(v)
			if !valid {
				ld.problem(&Problem{Key: ce.Name, Value: v, Source: "env " + ce.Name, Allowed: boolAllowed})
			} else if on {
				l.set(ce.Key, entry{value: "none", source: "env " + ce.Name, text: true})
			}
		case "MC_LOG_LEVEL":
			ld.mooncakeLogLevel(l, ce, v)
		case "MC_FORCE_TCP":
			on, valid := parseBool(v)
			if !valid {
				ld.problem(&Problem{Key: ce.Name, Value: v, Source: "env " + ce.Name, Allowed: boolAllowed})
			} else if on {
				ld.forceTCP = &entry{value: v, source: "env " + ce.Name}
			}
		default:
			l.set(ce.Key, entry{value: v, source: "env " + ce.Name, text: true, redisOnly: redisOnlyEnv[ce.Name]})
		}
	}

	ld.mooncakeUnreadEnv()

	var names []string
	for name := range ld.env {
		if strings.HasPrefix(name, envPrefix) && !internalEnv[name] {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	for _, name := range names {
		v, ok := get(name)
		if !ok {
			continue
		}
		key := keyForEnv(name)
		_, isSetting := lookupSetting(key)
		_, _, isOption := optionKey(key)
		if isSetting || isOption {
			if prev, ok := l.entries[key]; ok && fmt.Sprint(prev.value) != v {
				switch {
				case isSecret(key):
					ld.note("%s overrides %s from %s", name, key, prev.source)
				case key == "metadata":
					ld.note("%s=%s overrides %s %s from %s", name, metadata.Redact(v), key, showValue(metadata.Redact(fmt.Sprint(prev.value))), prev.source)
				default:
					ld.note("%s=%s overrides %s %s from %s", name, v, key, showValue(prev.value), prev.source)
				}
			}
			set(key, name, v)
			continue
		}
		ld.problem(unknownEnv(name, v))
	}
	ld.layers = append(ld.layers, l)
}

// ascendEnv applies ENABLE_ASCEND_TRANSFER_WITH_MOONCAKE as SGLang does:
// protocol ascend, and the NPU id from ASCEND_NPU_PHY_ID unless it is -1
// or unset, else the local device index. The ascend transport builds its
// host:port:npu_N segment name from hostname and npu_id.
func (ld *loader) ascendEnv(l *layer, v string, get func(string) (string, bool)) {
	const name = "ENABLE_ASCEND_TRANSFER_WITH_MOONCAKE"
	on, valid := parseBool(v)
	if !valid {
		ld.problem(&Problem{Key: name, Value: v, Source: "env " + name, Allowed: boolAllowed})
		return
	}
	if !on {
		return
	}
	if prev, ok := l.entries["protocol"]; ok && prev.value != "ascend" {
		ld.note("%s=%s selects protocol ascend over %s from %s, as SGLang does", name, v, showValue(prev.value), prev.source)
	}
	l.set("protocol", entry{value: "ascend", source: "env " + name, text: true})
	const key = "transports.ascend.npu_id"
	phy, ok := get("ASCEND_NPU_PHY_ID")
	if ok && strings.TrimSpace(phy) != "-1" {
		n, err := strconv.Atoi(strings.TrimSpace(phy))
		if err != nil || n < 0 {
			ld.problem(&Problem{Key: key, Value: phy, Source: "env ASCEND_NPU_PHY_ID",
				Allowed: "a physical NPU id (0 or more), or -1 to use local_device_index"})
			return
		}
		l.set(key, entry{value: n, source: "env ASCEND_NPU_PHY_ID"})
		return
	}
	l.set(key, entry{value: deferredIndex{}, source: "env " + name})
	ld.ascendIndex = "env " + name
}

// unknownEnv explains a KVCONNECT_* variable that names no setting. A
// near miss of a real name is an error (a typo must not pass silently);
// anything else is a warning, since the environment is shared with other
// programs.
func unknownEnv(name, v string) *Problem {
	known := []string{EnvConfigFile, EnvKVTransferConfig}
	for _, s := range settings {
		known = append(known, EnvName(s.key))
	}
	p := &Problem{Key: name, Value: v, Source: "env " + name,
		Reason:     "unknown kvconnect environment variable",
		Allowed:    "KVCONNECT_<SETTING> such as KVCONNECT_PROTOCOL, or KVCONNECT_TRANSPORTS__<TRANSPORT>__<OPTION> with double underscores between levels",
		Suggestion: closest(name, known)}
	key := keyForEnv(name)
	if strings.HasPrefix(key, transportsKey) {
		p.Reason = "transport options are set as KVCONNECT_TRANSPORTS__<TRANSPORT>__<OPTION>, e.g. KVCONNECT_TRANSPORTS__TCP__CONNECTIONS"
		return p
	}
	if p.Suggestion == "" {
		p.Warning = true
		p.Reason += "; ignored"
	}
	return p
}

// ParseEnvFile reads an environment file as SGLang and Mooncake users
// keep them (KEY=VALUE lines, optional "export ", # comments, quoted
// values) and returns its assignments as KEY=VALUE strings for
// Options.Environ. Malformed lines are *Problem values naming the line.
func ParseEnvFile(name string, data []byte) ([]string, error) {
	var out []string
	var probs []*Problem
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), maxConfigFile)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		line = strings.TrimSpace(strings.TrimPrefix(line, "export "))
		k, v, ok := strings.Cut(line, "=")
		k = strings.TrimSpace(k)
		if !ok || !validEnvName(k) {
			probs = append(probs, &Problem{Source: fmt.Sprintf("file %s line %d", name, n),
				Reason: fmt.Sprintf("%q is not a KEY=VALUE assignment", line), Allowed: "lines like MOONCAKE_PROTOCOL=rdma"})
			continue
		}
		v = strings.TrimSpace(v)
		if len(v) >= 2 && (v[0] == '"' || v[0] == '\'') && v[len(v)-1] == v[0] {
			if v[0] == '"' {
				if u, err := strconv.Unquote(v); err == nil {
					v = u
				} else {
					v = v[1 : len(v)-1]
				}
			} else {
				v = v[1 : len(v)-1]
			}
		} else if i := strings.Index(v, " #"); i >= 0 {
			v = strings.TrimSpace(v[:i])
		}
		out = append(out, k+"="+v)
	}
	if err := sc.Err(); err != nil {
		probs = append(probs, &Problem{Source: "file " + name, Reason: "cannot read: " + err.Error()})
	}
	return out, joinProblems(probs)
}

func validEnvName(s string) bool {
	for i, r := range s {
		if !(r == '_' || r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || i > 0 && r >= '0' && r <= '9') {
			return false
		}
	}
	return s != ""
}
