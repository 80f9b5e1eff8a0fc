package config

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

// TestDeviceNameFormats covers every device_name form used in the field,
// from every layer that can carry it.
func TestDeviceNameFormats(t *testing.T) {
	dir := t.TempDir()
	mapFile := writeFile(t, dir, "devices.json", `{"0": "mlx5_0,mlx5_1", "1": ["mlx5_2", "mlx5_3"]}`)
	yamlMap := writeFile(t, dir, "map.yaml", "device_name:\n  \"0\": mlx5_0\n  \"1\": mlx5_1\n")
	tests := []struct {
		name  string
		opts  Options
		want  string
		raw   bool // Values shows the raw form
		index int
	}{
		{"empty = auto", Options{}, "", false, 0},
		{"one name", Options{Environ: []string{"MOONCAKE_DEVICE=mlx5_0"}}, "mlx5_0", false, 0},
		{"comma list", Options{Environ: []string{"MOONCAKE_DEVICE=mlx5_0, mlx5_1"}}, "mlx5_0,mlx5_1", true, 0},
		{"JSON map index 0", Options{Environ: []string{`MOONCAKE_DEVICE={"0":"mlx5_0,mlx5_1","1":"mlx5_2"}`}}, "mlx5_0,mlx5_1", true, 0},
		{"JSON map index 1", Options{Environ: []string{`MOONCAKE_DEVICE={"0":"mlx5_0,mlx5_1","1":"mlx5_2"}`, "KVCONNECT_LOCAL_DEVICE_INDEX=1"}}, "mlx5_2", true, 1},
		{"json file", Options{Flags: flags(t, "--device-name", mapFile, "--local-device-index", "1")}, "mlx5_2,mlx5_3", true, 1},
		{"map in YAML", Options{ConfigFile: yamlMap, Flags: flags(t, "--local-device-index", "1")}, "mlx5_1", true, 1},
		{"vLLM kv_rank picks the entry", Options{KVTransferConfig: `{"kv_connector":"MooncakeConnector","kv_rank":1,
			"kv_connector_extra_config":{"device_name":"{\"0\":\"ib0\",\"1\":\"ib1\"}"}}`}, "ib1", true, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := mustLoad(t, tt.opts)
			if l.Config.DeviceName != tt.want || l.Config.LocalDeviceIndex != tt.index {
				t.Errorf("device_name = %q (index %d), want %q (index %d)", l.Config.DeviceName, l.Config.LocalDeviceIndex, tt.want, tt.index)
			}
			v, _ := l.Value("device_name")
			if (v.Raw != nil) != tt.raw || v.Value != tt.want {
				t.Errorf("Values shows %+v, want value %q and raw %v", v, tt.want, tt.raw)
			}
		})
	}
}

// TestDeviceNameErrors: a missing index names the index and the keys
// present; malformed maps and names say what is wrong.
func TestDeviceNameErrors(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name string
		env  []string
		want []string
	}{
		{"missing index", []string{`MOONCAKE_DEVICE={"0":"mlx5_0","1":"mlx5_1"}`, "KVCONNECT_LOCAL_DEVICE_INDEX=2"},
			[]string{"local_device_index 2", "keys present: 0, 1", "env MOONCAKE_DEVICE", "local_device_index from env KVCONNECT_LOCAL_DEVICE_INDEX"}},
		{"bad JSON", []string{`MOONCAKE_DEVICE={"0":"mlx5_0",}`}, []string{"not valid JSON"}},
		{"key not an index", []string{`MOONCAKE_DEVICE={"gpu0":"mlx5_0"}`}, []string{`"gpu0" is not a local device index`}},
		{"value not a name", []string{`MOONCAKE_DEVICE={"0":5}`}, []string{`entry "0" is not a device name`}},
		{"missing file", []string{"MOONCAKE_DEVICE=" + filepath.Join(dir, "nope.json")}, []string{"cannot read the device map file"}},
		{"empty item", []string{"MOONCAKE_DEVICE=mlx5_0,,mlx5_1"}, []string{"empty device name"}},
		{"bad character", []string{"MOONCAKE_DEVICE=mlx5 0"}, []string{`"mlx5 0"`}},
		{"bad entry", []string{`MOONCAKE_DEVICE={"0":"a b"}`}, []string{`entry "0"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, ps := loadErr(t, Options{Environ: tt.env})
			p := findProblem(ps, "device_name")
			if p == nil {
				t.Fatalf("no device_name problem in %v", ps)
			}
			for _, w := range tt.want {
				if !strings.Contains(p.Error(), w) {
					t.Errorf("%q does not mention %q", p, w)
				}
			}
		})
	}
}

// TestResolveDeviceName is the same resolution for code.
func TestResolveDeviceName(t *testing.T) {
	got, err := ResolveDeviceName(`{"0":"mlx5_0","3":"mlx5_3"}`, 3)
	if err != nil || got != "mlx5_3" {
		t.Errorf("ResolveDeviceName = %q, %v", got, err)
	}
	_, err = ResolveDeviceName(`{"0":"mlx5_0"}`, 1)
	var p *Problem
	if !errors.As(err, &p) || p.Key != "device_name" || !strings.Contains(p.Reason, "keys present: 0") {
		t.Errorf("missing index: %v", err)
	}
	// Validate refuses a map that was never resolved.
	err = Config{DeviceName: `{"0":"mlx5_0"}`}.Validate()
	if !errors.As(err, &p) || p.Key != "device_name" {
		t.Errorf("Validate of an unresolved map: %v", err)
	}
}
