package plugins

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
)

// DecodeOptions decodes a transport's options subtree (InitRequest.Options,
// a JSON object) into dst, a pointer to a struct with json tags. Unknown
// keys and values of the wrong type are errors that name the key
// (transports.<name>.<key>), the value and what is allowed, wrapping
// ErrInvalidArgument. Empty raw leaves dst unchanged (its defaults).
func DecodeOptions(transport string, raw []byte, dst any) error {
	if len(bytes.TrimSpace(raw)) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		return fmt.Errorf("%s: options must be a JSON object (transports.%s): %v: %w", transport, transport, err, ErrInvalidArgument)
	}
	known := optionKeys(dst)
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if _, ok := known[k]; !ok {
			return fmt.Errorf("%s: unknown option transports.%s.%s%s; known options: %s: %w",
				transport, transport, k, didYouMean(k, known), strings.Join(sortedKeys(known), ", "), ErrInvalidArgument)
		}
	}
	for _, k := range keys {
		field := known[k]
		fv := reflect.ValueOf(dst).Elem().FieldByIndex(field.Index)
		if err := json.Unmarshal(obj[k], fv.Addr().Interface()); err != nil {
			var te *json.UnmarshalTypeError
			msg := err.Error()
			if errors.As(err, &te) {
				msg = fmt.Sprintf("want %s", te.Type)
			}
			return fmt.Errorf("%s: option transports.%s.%s = %s: %s: %w", transport, transport, k, obj[k], msg, ErrInvalidArgument)
		}
	}
	return nil
}

func optionKeys(dst any) map[string]reflect.StructField {
	out := map[string]reflect.StructField{}
	t := reflect.TypeOf(dst).Elem()
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f
	}
	return out
}

func sortedKeys(m map[string]reflect.StructField) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func didYouMean(k string, known map[string]reflect.StructField) string {
	best := Closest(k, sortedKeys(known))
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}
