package connector_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/kvconnect/kvconnect/config"
	"github.com/kvconnect/kvconnect/connector"
)

func TestLoadConfig(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "kvconnect.yaml")
	if err := os.WriteFile(file, []byte("protocol: rdma\nrpc_port: 15001\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := connector.LoadConfig(connector.LoadOptions{
		ConfigFile: file,
		Base:       &connector.Config{EngineID: "embedded", Protocol: "efa"},
		Environ:    []string{"MOONCAKE_PROTOCOL=tcp"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Protocol != "tcp" || cfg.RPCPort != 15001 || cfg.EngineID != "embedded" || cfg.Hostname != "" {
		t.Errorf("LoadConfig = %+v", cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("loaded config does not validate: %v", err)
	}

	_, err = connector.LoadConfig(connector.LoadOptions{
		Base:    &connector.Config{Protocol: "rdam", BufferDevice: "tpu"},
		Environ: []string{},
	})
	if !errors.Is(err, connector.ErrInvalidArgument) {
		t.Errorf("error %v: want ErrInvalidArgument", err)
	}
	byKey := map[string]*config.Problem{}
	for _, p := range config.Problems(err) {
		byKey[p.Key] = p
	}
	if p := byKey["protocol"]; len(byKey) != 2 || p == nil || p.Suggestion != "rdma" || p.Source != "code" || byKey["buffer_device"] == nil {
		t.Errorf("problems %v", config.Problems(err))
	}
	var p *connector.ConfigProblem
	if !errors.As(err, &p) || byKey[p.Key] == nil {
		t.Errorf("errors.As: %v", p)
	}
}
