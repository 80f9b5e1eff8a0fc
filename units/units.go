// Package units parses the byte sizes and durations that appear in
// kvconnect's configuration ("64MiB", "1GB", "30s"), from strings or numbers.
package units

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

var sizeSuffixes = []struct {
	suffix string
	mult   float64
}{
	// longest first so "KiB" wins over "B"
	{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"tib", 1 << 40},
	{"kb", 1e3}, {"mb", 1e6}, {"gb", 1e9}, {"tb", 1e12},
	{"k", 1 << 10}, {"m", 1 << 20}, {"g", 1 << 30}, {"t", 1 << 40},
	{"b", 1},
}

// ParseSize parses a byte size: a plain integer ("4096", "1e9" as vLLM
// writes kv_buffer_size) or a number with a unit: B, KB/MB/GB/TB (powers of
// 1000), KiB/MiB/GiB/TiB and K/M/G/T (powers of 1024). Case-insensitive.
func ParseSize(s string) (uint64, error) {
	in := strings.TrimSpace(s)
	if in == "" {
		return 0, fmt.Errorf("empty size; write a number of bytes or a size like 64MiB")
	}
	lower := strings.ToLower(in)
	mult := 1.0
	num := lower
	for _, sf := range sizeSuffixes {
		if strings.HasSuffix(lower, sf.suffix) {
			mult = sf.mult
			num = strings.TrimSpace(strings.TrimSuffix(lower, sf.suffix))
			break
		}
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("%q is not a size; write a number of bytes or a size like 64MiB, 1GB, 512KiB", s)
	}
	v := f * mult
	if v < 0 {
		return 0, fmt.Errorf("size %q is negative", s)
	}
	if v >= 1<<63 {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	if v != math.Trunc(v) {
		return 0, fmt.Errorf("size %q is not a whole number of bytes", s)
	}
	return uint64(v), nil
}

// FormatSize formats n bytes with a binary unit, e.g. "64MiB".
func FormatSize(n uint64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	i := 0
	for n >= 1024 && n%1024 == 0 && i < len(units)-1 {
		n /= 1024
		i++
	}
	return strconv.FormatUint(n, 10) + units[i]
}

// Size is a byte count that unmarshals from a JSON number or a size string.
type Size uint64

// UnmarshalJSON accepts 4096, 1e9 or "64MiB".
func (s *Size) UnmarshalJSON(b []byte) error {
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	var n uint64
	var err error
	switch x := v.(type) {
	case float64:
		n, err = ParseSize(strconv.FormatFloat(x, 'f', -1, 64))
	case string:
		n, err = ParseSize(x)
	default:
		err = fmt.Errorf("%s is not a size; write a number of bytes or a string like \"64MiB\"", b)
	}
	if err != nil {
		return err
	}
	*s = Size(n)
	return nil
}

// MarshalJSON writes the size as a string with a binary unit.
func (s Size) MarshalJSON() ([]byte, error) { return json.Marshal(FormatSize(uint64(s))) }

// ParseDuration parses "30s", "500ms", "2m" or a bare number of seconds.
func ParseDuration(s string) (time.Duration, error) {
	in := strings.TrimSpace(s)
	if f, err := strconv.ParseFloat(in, 64); err == nil {
		switch {
		case math.IsNaN(f) || math.IsInf(f, 0):
			return 0, fmt.Errorf("%q is not a duration; write e.g. 30s, 500ms, 2m, or a number of seconds", s)
		case f < 0 || f > math.MaxInt64/float64(time.Second):
			return 0, fmt.Errorf("duration %q out of range", s)
		}
		return time.Duration(f * float64(time.Second)), nil
	}
	d, err := time.ParseDuration(in)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration; write e.g. 30s, 500ms, 2m, or a number of seconds", s)
	}
	if d < 0 {
		return 0, fmt.Errorf("duration %q is negative", s)
	}
	return d, nil
}

// Duration unmarshals from "30s" or a JSON number of seconds.
type Duration time.Duration

// UnmarshalJSON accepts "30s", "500ms" or 30 (seconds).
func (d *Duration) UnmarshalJSON(b []byte) error {
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	var s string
	switch x := v.(type) {
	case float64:
		s = strconv.FormatFloat(x, 'f', -1, 64)
	case string:
		s = x
	default:
		return fmt.Errorf("%s is not a duration; write e.g. \"30s\" or a number of seconds", b)
	}
	p, err := ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(p)
	return nil
}

// MarshalJSON writes the duration as a Go duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// HumanSize formats n bytes for people: "23.5GiB", "512KiB", "17B".
func HumanSize(n uint64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB"}
	f := float64(n)
	i := 0
	for f >= 1024 && i < len(units)-1 {
		f /= 1024
		i++
	}
	if i == 0 || f == math.Trunc(f) {
		return strconv.FormatFloat(f, 'f', 0, 64) + units[i]
	}
	return strconv.FormatFloat(f, 'f', 1, 64) + units[i]
}
