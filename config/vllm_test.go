package config

import (
	"strings"
	"testing"
)

// TestVLLMDialect maps a kv_transfer_config as vLLM users write it.
func TestVLLMDialect(t *testing.T) {
	js := `{
	  "kv_connector": "MooncakeConnector",
	  "kv_role": "kv_consumer",
	  "kv_rank": 1,
	  "kv_parallel_size": 2,
	  "kv_ip": "10.0.0.7",
	  "kv_port": 14579,
	  "kv_buffer_device": "cpu",
	  "kv_buffer_size": 1e9,
	  "engine_id": "decode-3",
	  "kv_connector_module_path": null,
	  "kv_load_failure_policy": "recompute",
	  "kv_connector_extra_config": {
	    "mooncake_protocol": "rdma",
	    "device_name": "mlx5_0,mlx5_1",
	    "num_workers": 10,
	    "bootstrap_server_address": "10.0.0.1:8998"
	  }
	}`
	l := mustLoad(t, Options{KVTransferConfig: js})
	c := l.Config
	want := Config{Protocol: "rdma", Role: "kv_consumer", LocalDeviceIndex: 1, Hostname: "10.0.0.7", RPCPort: 14579,
		BufferDevice: "cpu", BufferSize: 1e9, EngineID: "decode-3", DeviceName: "mlx5_0,mlx5_1"}
	if c.Protocol != want.Protocol || c.Role != want.Role || c.LocalDeviceIndex != want.LocalDeviceIndex ||
		c.Hostname != want.Hostname || c.RPCPort != want.RPCPort || c.BufferDevice != want.BufferDevice ||
		c.BufferSize != want.BufferSize || c.EngineID != want.EngineID || c.DeviceName != want.DeviceName {
		t.Errorf("config = %+v\nwant %+v", c, want)
	}
	for key, src := range map[string]string{
		"role":               "kv_transfer_config kv_role",
		"local_device_index": "kv_transfer_config kv_rank",
		"hostname":           "kv_transfer_config kv_ip",
		"protocol":           "kv_transfer_config kv_connector_extra_config.mooncake_protocol",
		"device_name":        "kv_transfer_config kv_connector_extra_config.device_name",
	} {
		if got := l.Source(key); got != src {
			t.Errorf("source of %s = %q, want %q", key, got, src)
		}
	}
	ignored := map[string]bool{}
	for _, ig := range l.Ignored {
		ignored[ig.Field] = true
		if ig.Reason == "" || ig.Source == "" {
			t.Errorf("ignored %s without reason or source: %+v", ig.Field, ig)
		}
	}
	for _, f := range []string{"kv_parallel_size", "kv_load_failure_policy", "kv_connector_extra_config.num_workers",
		"kv_connector_extra_config.bootstrap_server_address"} {
		if !ignored[f] {
			t.Errorf("%s not reported as ignored (got %v)", f, l.Ignored)
		}
	}
	if ignored["kv_connector_module_path"] {
		t.Errorf("a null field is reported as ignored")
	}
}

// TestVLLMConnectorNames accepts MooncakeConnector and its versioned
// names and rejects other connectors, naming what is supported.
func TestVLLMConnectorNames(t *testing.T) {
	for _, name := range []string{"MooncakeConnector", "MooncakeConnectorV1", "MooncakeConnectorV0"} {
		mustLoad(t, Options{KVTransferConfig: `{"kv_connector":"` + name + `","kv_role":"kv_both"}`})
	}
	for _, name := range []string{"NixlConnector", "P2pNcclConnector", "MooncakeStoreConnector", "LMCacheConnectorV1"} {
		_, ps := loadErr(t, Options{KVTransferConfig: `{"kv_connector":"` + name + `"}`})
		p := findProblem(ps, "kv_connector")
		if p == nil || !strings.Contains(p.Error(), "MooncakeConnector") || !strings.Contains(p.Error(), name) {
			t.Errorf("%s: problems %v, want one naming %s and MooncakeConnector", name, ps, name)
		}
	}
	_, ps := loadErr(t, Options{KVTransferConfig: `{"kv_connector":"MoonCakeConnector"}`})
	if p := findProblem(ps, "kv_connector"); p == nil || p.Suggestion != "MooncakeConnector" {
		t.Errorf("MoonCakeConnector: %v, want a suggestion of MooncakeConnector", ps)
	}
	l := mustLoad(t, Options{KVTransferConfig: `{"kv_role":"kv_producer"}`})
	if len(l.Notes) != 1 || !strings.Contains(l.Notes[0], "kv_connector is not set") {
		t.Errorf("missing kv_connector: notes %v", l.Notes)
	}
}

// TestVLLMUnknownFieldsWarn: unknown fields in a vLLM JSON are warnings
// with suggestions, never errors.
func TestVLLMUnknownFieldsWarn(t *testing.T) {
	l := mustLoad(t, Options{KVTransferConfig: `{"kv_connector":"MooncakeConnector","kv_rol":"kv_producer",
		"kv_connector_extra_config":{"mooncake_protocl":"tcp","some_other_knob":1}}`})
	want := map[string]string{
		"kv_rol": "kv_role",
		"kv_connector_extra_config.mooncake_protocl": "kv_connector_extra_config.mooncake_protocol",
		"kv_connector_extra_config.some_other_knob":  "",
	}
	if len(l.Warnings) != len(want) {
		t.Fatalf("warnings %v, want %d", l.Warnings, len(want))
	}
	for _, w := range l.Warnings {
		sugg, ok := want[w.Key]
		if !ok || !w.Warning || w.Suggestion != sugg {
			t.Errorf("warning %+v: want key in %v with suggestion %q", w, want, sugg)
		}
	}
	if l.Config.Role != DefaultRole {
		t.Errorf("role = %q from a misspelt field", l.Config.Role)
	}
}

// TestVLLMInputs: a kv_transfer_config from a file (@file or a path),
// from a section of the config file (map or string), from the
// environment; the flag wins over the environment, which wins over the
// section.
func TestVLLMInputs(t *testing.T) {
	dir := t.TempDir()
	vf := writeFile(t, dir, "vllm.json", `{"kv_connector":"MooncakeConnector","engine_id":"from-file"}`)
	section := writeFile(t, dir, "kv.yaml", "kv_transfer_config:\n  kv_connector: MooncakeConnector\n  engine_id: from-section\n  kv_role: kv_consumer\n")
	sectionStr := writeFile(t, dir, "kvs.yaml", "kv_transfer_config: '@"+vf+"'\n")
	env := "KVCONNECT_KV_TRANSFER_CONFIG=" + `{"engine_id":"from-env","kv_connector":"MooncakeConnector"}`
	tests := []struct {
		name, want, src string
		opts            Options
	}{
		{"@file", "from-file", "kv_transfer_config engine_id in file vllm.json", Options{KVTransferConfig: "@" + vf}},
		{"path", "from-file", "kv_transfer_config engine_id in file vllm.json", Options{KVTransferConfig: vf}},
		{"section", "from-section", "kv_transfer_config engine_id in file kv.yaml", Options{ConfigFile: section}},
		{"section string", "from-file", "kv_transfer_config engine_id in file vllm.json", Options{ConfigFile: sectionStr}},
		{"env over section", "from-env", "kv_transfer_config engine_id in env KVCONNECT_KV_TRANSFER_CONFIG",
			Options{ConfigFile: section, Environ: []string{env}}},
		{"flag over env", "from-file", "kv_transfer_config engine_id in file vllm.json",
			Options{ConfigFile: section, Environ: []string{env}, Flags: flags(t, "--kv-transfer-config", "@"+vf)}},
		{"inline flag", "inline", "kv_transfer_config engine_id in flag --kv-transfer-config",
			Options{Flags: flags(t, "--kv-transfer-config", `{"kv_connector":"MooncakeConnector","engine_id":"inline"}`)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := mustLoad(t, tt.opts)
			if l.Config.EngineID != tt.want || l.Source("engine_id") != tt.src {
				t.Errorf("engine_id = %q from %q, want %q from %q", l.Config.EngineID, l.Source("engine_id"), tt.want, tt.src)
			}
		})
	}
	// The section keeps fields the higher layers do not set.
	l := mustLoad(t, Options{ConfigFile: section, Environ: []string{env}})
	if l.Config.Role != "kv_consumer" {
		t.Errorf("role from section = %q", l.Config.Role)
	}
}

// TestVLLMBadInput: malformed or unreadable kv_transfer_config inputs
// are problems that say where and what.
func TestVLLMBadInput(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"syntax", "{\"kv_connector\":\n \"MooncakeConnector\",,}", "line 2"},
		{"array", `["MooncakeConnector"]`, "must be an object"},
		{"not an object at top", `{"kv_connector_extra_config": 5}`, "kv_connector_extra_config"},
		{"missing file", "@/nonexistent/vllm.json", "no such file"},
		{"connector not a string", `{"kv_connector": 3}`, "kv_connector"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, ps := loadErr(t, Options{KVTransferConfig: tt.in})
			if !strings.Contains(ps[0].Error(), tt.want) {
				t.Errorf("problem %q does not mention %q", ps[0], tt.want)
			}
		})
	}
}

// TestVLLMBufferDevice: vLLM's default cuda loads, with a warning saying
// KV regions are host memory (GPU registration is not supported yet).
func TestVLLMBufferDevice(t *testing.T) {
	l := mustLoad(t, Options{KVTransferConfig: `{"kv_connector":"MooncakeConnector","kv_role":"kv_both","kv_buffer_device":"cuda"}`})
	var w *Problem
	for _, p := range l.Warnings {
		if p.Key == "buffer_device" {
			w = p
		}
	}
	if w == nil || !strings.Contains(w.Error(), "host memory") || !strings.Contains(w.Error(), "not supported yet") ||
		w.Source != "kv_transfer_config kv_buffer_device" || l.Config.BufferDevice != "cuda" {
		t.Errorf("warnings %v: want buffer_device cuda loaded with a host-memory warning from kv_transfer_config kv_buffer_device", l.Warnings)
	}
}

// TestSecretInKVTransferConfig: a secret written in kv_transfer_config
// (vLLM's command line) is refused, never shown, and an unknown key that
// looks like a secret is shown hidden in its warning.
func TestSecretInKVTransferConfig(t *testing.T) {
	const secret = "SUPERSECRETVALUE-0123456789"
	for _, tc := range []struct {
		name, js, key string
		warning       bool
	}{
		{"auth_secret in extra config", `{"kv_connector":"MooncakeConnector","kv_connector_extra_config":{"auth_secret":"` + secret + `"}}`, "kv_connector_extra_config.auth_secret", false},
		{"metadata_password in extra config", `{"kv_connector":"MooncakeConnector","kv_connector_extra_config":{"metadata_password":"` + secret + `"}}`, "kv_connector_extra_config.metadata_password", false},
		{"auth_secret at the top", `{"kv_connector":"MooncakeConnector","auth_secret":"` + secret + `"}`, "auth_secret", false},
		{"another connector's token", `{"kv_connector":"MooncakeConnector","kv_connector_extra_config":{"api_token":"` + secret + `"}}`, "kv_connector_extra_config.api_token", true},
		{"a typo of auth_secret", `{"kv_connector":"MooncakeConnector","kv_connector_extra_config":{"auth_secert":"` + secret + `"}}`, "kv_connector_extra_config.auth_secert", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := Load(Options{KVTransferConfig: tc.js, Environ: []string{}})
			probs := Problems(err)
			var all []string
			if err != nil {
				all = append(all, err.Error())
			}
			if l != nil {
				probs = append(probs, l.Warnings...)
			}
			var found bool
			for _, p := range probs {
				all = append(all, p.Error())
				if p.Key == tc.key && p.Warning == tc.warning {
					found = true
				}
			}
			if !found {
				t.Errorf("problems %v, want one for %s (warning %v)", probs, tc.key, tc.warning)
			}
			if strings.Contains(strings.Join(all, "\n"), secret) || l != nil && shows(t, l, nil, secret) {
				t.Errorf("the secret shows: %v", all)
			}
		})
	}
}
