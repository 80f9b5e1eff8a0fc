package config

import (
	"encoding/json"
	"testing"
)

// FuzzLoad feeds arbitrary bytes to the loader as a config file (YAML,
// TOML, JSON), as a vLLM kv_transfer_config and as an environment file.
// Load must answer with problems, never panic; whatever it accepts must
// validate and encode as JSON (transport options reach plugins as JSON).
func FuzzLoad(f *testing.F) {
	seeds := []struct {
		data string
		kind uint8
	}{
		{"protocol: rdma\nfallback: [ucx, tcp]\ntransports:\n  tcp:\n    connections: 4\n", 0},
		{"device_name:\n  \"0\": mlx5_0\nlocal_device_index: 1\n", 0},
		{"kv_transfer_config:\n  kv_connector: MooncakeConnector\n  kv_rank: 2\n", 0},
		{"a: &a [*a, *a]\n", 0},
		{"protocol = \"tcp\"\n[transports.tcp]\nconnections = 4\n", 1},
		{"[kv_transfer_config]\nkv_connector = \"NixlConnector\"\n", 1},
		{`{"protocol":"tcp","rpc_port":1e99,"buffer_size":-1}`, 2},
		{`{"kv_connector":"MooncakeConnector","kv_rank":1,"kv_connector_extra_config":{"device_name":"{\"1\":\"ib0\"}"}}`, 3},
		{`{"kv_buffer_size":"1e9","kv_port":"x"}`, 3},
		{"MOONCAKE_PROTOCOL=rdma\nMC_FORCE_TCP=1\nENABLE_ASCEND_TRANSFER_WITH_MOONCAKE=true\nASCEND_NPU_PHY_ID=-1\n", 4},
		{"KVCONNECT_TRANSPORTS__TCP__CONNECTIONS=8\nMOONCAKE_DEVICE={\"0\":\"a\"}\n", 4},
		{"metadata: redis://:pw@h:1/2\nmetadata_redis_db: 3\nmetadata_ttl: 500ms\nmetadata_password: [1]\n", 0},
		{"MOONCAKE_TE_META_DATA_SERVER=etcd://a:1;b:2\nMC_REDIS_PASSWORD=x\nMC_REDIS_DB_INDEX=-1\nMC_METADATA_CLUSTER_ID=c\n", 4},
	}
	for _, s := range seeds {
		f.Add([]byte(s.data), s.kind)
	}
	f.Fuzz(func(t *testing.T, data []byte, kind uint8) {
		read := func(string) ([]byte, error) { return data, nil }
		opts := Options{Environ: []string{}}
		switch kind % 5 {
		case 0:
			opts.ConfigFile = "fuzz.yaml"
		case 1:
			opts.ConfigFile = "fuzz.toml"
		case 2:
			opts.ConfigFile = "fuzz.json"
		case 3:
			opts.KVTransferConfig = string(data)
		case 4:
			env, _ := ParseEnvFile("fuzz.env", data)
			opts.Environ = append(env, "") // non-nil: never the process environment
		}
		l, err := newLoader(opts, read).load()
		if l == nil {
			t.Fatal("load returned a nil Loaded")
		}
		if err != nil {
			ps := Problems(err)
			if len(ps) == 0 {
				t.Fatalf("error without problems: %v", err)
			}
			for _, p := range ps {
				if p.Text() == "" {
					t.Fatal("empty problem")
				}
			}
			return
		}
		if verr := l.Config.Validate(); verr != nil {
			t.Fatalf("loaded without error but does not validate: %v", verr)
		}
		if _, jerr := json.Marshal(l.Config); jerr != nil {
			t.Fatalf("loaded config does not encode as JSON: %v", jerr)
		}
	})
}
