package config

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/kvconnect/kvconnect/auth"
	"github.com/kvconnect/kvconnect/units"
)

// convert turns a value as written (a string from the environment or a
// flag, a number, string, list or map from a file) into the setting's
// type: string, int64, time.Duration, uint64, []string (never nil) or, for
// device_name, a string or a map[string]string.
func convert(s *setting, e entry) (any, *Problem) {
	bad := func(want string) *Problem {
		return &Problem{Key: s.key, Value: e.value, Source: e.source, Allowed: want}
	}
	switch s.kind {
	case kindString:
		str, ok := scalarString(e.value)
		if !ok {
			return nil, bad("a string")
		}
		str = strings.TrimSpace(str)
		if len(s.allowed) > 0 && !contains(s.allowed, str) {
			p := bad(oneOf(s.allowed))
			p.Suggestion = closest(str, s.allowed)
			return nil, p
		}
		return str, nil
	case kindSecret:
		var str string
		switch x := e.value.(type) {
		case auth.Secret:
			str = string(x)
		case string:
			str = x
		default:
			return nil, &Problem{Key: s.key, Value: redactedValue, Source: e.source, Allowed: "a string"}
		}
		return auth.Secret(strings.TrimSpace(str)), nil
	case kindInt:
		n, ok := toInt(e.value)
		if !ok {
			return nil, bad(fmt.Sprintf("an integer between %d and %d", s.min, s.max))
		}
		if n < s.min || n > s.max {
			return nil, bad(fmt.Sprintf("an integer between %d and %d", s.min, s.max))
		}
		return n, nil
	case kindDuration:
		var d time.Duration
		var err error
		switch x := e.value.(type) {
		case time.Duration:
			d = x
			if d < 0 {
				err = fmt.Errorf("negative")
			}
		case string:
			d, err = units.ParseDuration(x)
		default:
			if f, ok := toFloat(x); ok {
				d, err = units.ParseDuration(strconv.FormatFloat(f, 'f', -1, 64))
			} else {
				err = fmt.Errorf("not a duration")
			}
		}
		if err != nil {
			return nil, bad("a duration like 30s, 500ms or a number of seconds, not negative")
		}
		return d, nil
	case kindSize:
		var n uint64
		var err error
		switch x := e.value.(type) {
		case uint64:
			n = x
		case string:
			n, err = units.ParseSize(x)
		default:
			if f, ok := toFloat(x); ok {
				n, err = units.ParseSize(strconv.FormatFloat(f, 'f', -1, 64))
			} else {
				err = fmt.Errorf("not a size")
			}
		}
		if err != nil {
			return nil, bad(s.kind.describe())
		}
		return n, nil
	case kindBool:
		switch x := e.value.(type) {
		case bool:
			return x, nil
		case string:
			if b, ok := parseBool(x); ok && strings.TrimSpace(x) != "" {
				return b, nil
			}
		}
		return nil, bad(boolAllowed)
	case kindList:
		list, ok := toList(e.value)
		if !ok {
			return nil, bad(s.kind.describe())
		}
		return list, nil
	case kindDevice:
		switch x := e.value.(type) {
		case map[string]any:
			m, p := deviceMap(x)
			if p != nil {
				p.Key, p.Value, p.Source = s.key, e.value, e.source
				return nil, p
			}
			return m, nil
		case map[string]string:
			return x, nil
		}
		str, ok := scalarString(e.value)
		if !ok {
			return nil, bad(s.kind.describe())
		}
		return strings.TrimSpace(str), nil
	}
	return nil, bad("a known kind of value (internal error)")
}

// scalarString accepts strings, and numbers and booleans written where a
// string was meant (engine_id: 42 in YAML).
func scalarString(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case bool:
		return strconv.FormatBool(x), true
	case int, int64, int32, uint64, uint32, uint:
		return fmt.Sprint(x), true
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return "", false
		}
		return strconv.FormatFloat(x, 'f', -1, 64), true
	}
	return "", false
}

func toInt(v any) (int64, bool) {
	switch x := v.(type) {
	case int64:
		return x, true
	case int:
		return int64(x), true
	case int32:
		return int64(x), true
	case uint64:
		if x > math.MaxInt64 {
			return 0, false
		}
		return int64(x), true
	case float64:
		if x != math.Trunc(x) || math.Abs(x) > 1<<53 {
			return 0, false
		}
		return int64(x), true
	case string:
		n, err := strconv.ParseInt(strings.TrimSpace(x), 10, 64)
		if err != nil {
			return 0, false
		}
		return n, true
	}
	return 0, false
}

func toFloat(v any) (float64, bool) {
	switch x := v.(type) {
	case int64:
		return float64(x), true
	case int:
		return float64(x), true
	case uint64:
		return float64(x), true
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return 0, false
		}
		return x, true
	}
	return 0, false
}

// toList accepts a list of strings, or a string: "ucx,tcp", `["ucx","tcp"]`,
// and "", "none" or "[]" for an empty list. It never returns nil when ok.
func toList(v any) ([]string, bool) {
	var items []any
	switch x := v.(type) {
	case []string:
		items = make([]any, len(x))
		for i, s := range x {
			items[i] = s
		}
	case []any:
		items = x
	case string:
		s := strings.TrimSpace(x)
		switch {
		case s == "" || strings.EqualFold(s, "none") || s == "[]":
			return []string{}, true
		case strings.HasPrefix(s, "["):
			var l []any
			if err := json.Unmarshal([]byte(s), &l); err != nil {
				return nil, false
			}
			items = l
		default:
			for _, part := range strings.Split(s, ",") {
				items = append(items, part)
			}
		}
	default:
		return nil, false
	}
	out := make([]string, 0, len(items))
	for _, it := range items {
		s, ok := it.(string)
		if !ok {
			return nil, false
		}
		s = strings.TrimSpace(s)
		if s == "" {
			return nil, false
		}
		out = append(out, s)
	}
	return out, true
}

// jsonable turns env/flag strings that look like JSON numbers or booleans
// into them, so KVCONNECT_TRANSPORTS__TCP__CONNECTIONS=8 reaches the
// transport as the number 8.
func jsonable(s string) any {
	t := strings.TrimSpace(s)
	var x any
	if err := json.Unmarshal([]byte(t), &x); err == nil {
		switch x.(type) {
		case float64, bool:
			return x
		}
	}
	return s
}

// parseBool reads the boolean environment variables of SGLang and
// Mooncake: 1/true/yes/on and 0/false/no/off, any case.
func parseBool(s string) (bool, bool) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "1", "true", "yes", "on":
		return true, true
	case "0", "false", "no", "off", "":
		return false, true
	}
	return false, false
}

// display turns a converted value into what Values shows: durations as
// strings, int64 as int.
func display(v any) any {
	switch x := v.(type) {
	case time.Duration:
		return x.String()
	case int64:
		return int(x)
	}
	return v
}

func oneOf(list []string) string {
	switch len(list) {
	case 0:
		return ""
	case 1:
		return list[0]
	}
	return "one of " + strings.Join(list, ", ")
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
