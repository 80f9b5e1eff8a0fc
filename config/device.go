package config

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
)

// maxDeviceMapFile bounds a device_name .json file.
const maxDeviceMapFile = 1 << 20

// ResolveDeviceName turns a device_name as operators write it into the
// device list for one local device (GPU/NPU) index:
//
//	""                                   -> "" (auto-discover)
//	"mlx5_0" or "mlx5_0,mlx5_1"          -> as is, for every device
//	`{"0":"mlx5_0,mlx5_1","1":"mlx5_2"}` -> the entry for index
//	"/etc/kvconnect/devices.json"        -> the entry for index in that file's map
//
// An index missing from the map is an error naming the index and the keys
// present. Errors are *Problem values wrapping ErrInvalid. Load does this
// for the device_name setting; embedders who fill Config.DeviceName in
// code may call it themselves.
func ResolveDeviceName(raw string, index int) (string, error) {
	dev, p := convert(mustSetting("device_name"), entry{value: raw})
	if p != nil {
		return "", p
	}
	final, p := resolveDevice(dev, index, "", nil)
	if p != nil {
		p.Key = "device_name"
		if p.Value == nil {
			p.Value = raw
		}
		return "", p
	}
	return final, nil
}

// resolveDevice resolves a converted device_name (a string or a
// map[string]string) for index. The problem it returns has Reason,
// Allowed and Suggestion set; the caller fills in key, value and source.
//
// indexSource, if known, says where index came from, for the message
// about a missing entry.
func resolveDevice(dev any, index int, indexSource string, read func(string) ([]byte, error)) (string, *Problem) {
	var m map[string]string
	switch x := dev.(type) {
	case map[string]string:
		m = x
	case string:
		s := strings.TrimSpace(x)
		switch {
		case s == "":
			return "", nil
		case strings.HasPrefix(s, "{"):
			mm, p := parseDeviceMap([]byte(s))
			if p != nil {
				return "", p
			}
			m = mm
		case strings.HasSuffix(strings.ToLower(s), ".json"):
			b, err := readLimited(read, s, maxDeviceMapFile)
			if err != nil {
				return "", &Problem{Reason: "cannot read the device map file: " + err.Error(),
					Allowed: `a readable .json file holding a map per local device index, e.g. {"0":"mlx5_0","1":"mlx5_1"}`}
			}
			mm, p := parseDeviceMap(b)
			if p != nil {
				p.Reason = "device map file " + s + ": " + p.Reason
				return "", p
			}
			m = mm
		default:
			return checkDeviceList(s)
		}
	default:
		return "", &Problem{Allowed: kindDevice.describe()}
	}
	key := strconv.Itoa(index)
	names, ok := m[key]
	if !ok {
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool {
			a, _ := strconv.Atoi(keys[i])
			b, _ := strconv.Atoi(keys[j])
			return a < b
		})
		present := "none"
		if len(keys) > 0 {
			present = strings.Join(keys, ", ")
		}
		from := ""
		if indexSource != "" {
			from = " (local_device_index from " + indexSource + ")"
		}
		return "", &Problem{
			Reason:  fmt.Sprintf("no entry for local_device_index %d in the per-device map (keys present: %s)%s", index, present, from),
			Allowed: "a map with an entry for every local device index, or set local_device_index (vLLM kv_rank) to one of the keys",
		}
	}
	final, p := checkDeviceList(names)
	if p != nil {
		p.Reason = fmt.Sprintf("entry %q: %s", key, p.Reason)
	}
	return final, p
}

// parseDeviceMap parses {"0":"mlx5_0,mlx5_1","1":"mlx5_2"}.
func parseDeviceMap(b []byte) (map[string]string, *Problem) {
	var raw any
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, &Problem{Reason: "not valid JSON: " + err.Error(),
			Allowed: `a JSON map per local device index like {"0":"mlx5_0,mlx5_1","1":"mlx5_2"}`}
	}
	obj, ok := raw.(map[string]any)
	if !ok {
		return nil, &Problem{Reason: "the JSON is not an object",
			Allowed: `a JSON map per local device index like {"0":"mlx5_0,mlx5_1","1":"mlx5_2"}`}
	}
	return deviceMap(obj)
}

// deviceMap checks a per-device map: keys are local device indexes,
// values device names, comma lists or lists of names.
func deviceMap(obj map[string]any) (map[string]string, *Problem) {
	out := make(map[string]string, len(obj))
	for _, k := range sortedKeys(obj) {
		n, err := strconv.Atoi(strings.TrimSpace(k))
		if err != nil || n < 0 {
			return nil, &Problem{Reason: fmt.Sprintf("map key %q is not a local device index", k),
				Allowed: `keys that are device indexes "0", "1", ...`}
		}
		var val string
		switch x := obj[k].(type) {
		case string:
			val = x
		case []any:
			parts := make([]string, 0, len(x))
			for _, it := range x {
				s, ok := it.(string)
				if !ok {
					return nil, &Problem{Reason: fmt.Sprintf("map entry %q holds a list with a non-string", k),
						Allowed: `device names as strings: {"0":"mlx5_0,mlx5_1"} or {"0":["mlx5_0","mlx5_1"]}`}
				}
				parts = append(parts, s)
			}
			val = strings.Join(parts, ",")
		default:
			return nil, &Problem{Reason: fmt.Sprintf("map entry %q is not a device name", k),
				Allowed: `device names as strings: {"0":"mlx5_0,mlx5_1"} or {"0":["mlx5_0","mlx5_1"]}`}
		}
		out[strconv.Itoa(n)] = val
	}
	return out, nil
}

// checkDeviceList checks "mlx5_0, mlx5_1" and returns it normalised
// ("mlx5_0,mlx5_1").
func checkDeviceList(s string) (string, *Problem) {
	parts := strings.Split(s, ",")
	for i, p := range parts {
		p = strings.TrimSpace(p)
		if p == "" {
			return "", &Problem{Reason: "empty device name in the list",
				Allowed: `device names separated by commas, like "mlx5_0,mlx5_1"`}
		}
		for _, r := range p {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_-.:", r)) {
				return "", &Problem{Reason: fmt.Sprintf("device name %q has the character %q", p, r),
					Allowed: `device names of letters, digits, _ - . and : separated by commas, a JSON map per local device index, or a path to a .json file`}
			}
		}
		parts[i] = p
	}
	return strings.Join(parts, ","), nil
}

// readLimited reads at most limit bytes of a file through read
// (readFile when nil).
func readLimited(read func(string) ([]byte, error), path string, limit int) ([]byte, error) {
	if read == nil {
		return readFile(path, limit)
	}
	b, err := read(path)
	if err != nil {
		return nil, err
	}
	if len(b) > limit {
		return nil, fmt.Errorf("%s is more than the %d bytes allowed", path, limit)
	}
	return b, nil
}

// readFile reads a regular file of at most limit bytes; it does not open
// FIFOs or devices, which could block or never end.
func readFile(path string, limit int) ([]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	if st.Size() > int64(limit) {
		return nil, fmt.Errorf("%s is %d bytes, more than the %d allowed", path, st.Size(), limit)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, int64(limit)+1))
	if err != nil {
		return nil, err
	}
	if len(b) > limit {
		return nil, fmt.Errorf("%s is more than the %d bytes allowed", path, limit)
	}
	return b, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func mustSetting(key string) *setting {
	s, ok := lookupSetting(key)
	if !ok {
		panic("config: no setting " + key)
	}
	return s
}
