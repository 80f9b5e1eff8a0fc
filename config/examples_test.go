package config

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/knadh/koanf/parsers/yaml"
)

const examplesDir = "../examples/configs"

// TestExamples: the example configs load without problems; the YAML and
// the TOML give the same Config; the annotated YAML sets every setting.
func TestExamples(t *testing.T) {
	yml := mustLoad(t, Options{ConfigFile: filepath.Join(examplesDir, "kvconnect.yaml")})
	tml := mustLoad(t, Options{ConfigFile: filepath.Join(examplesDir, "kvconnect.toml")})
	a, _ := json.Marshal(yml.Config)
	b, _ := json.Marshal(tml.Config)
	if string(a) != string(b) {
		t.Errorf("kvconnect.yaml and kvconnect.toml differ:\n%s\n%s", a, b)
	}
	if len(yml.Warnings) != 0 || len(tml.Warnings) != 0 {
		t.Errorf("warnings: %v %v", yml.Warnings, tml.Warnings)
	}
	raw, err := os.ReadFile(filepath.Join(examplesDir, "kvconnect.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := yaml.Parser().Unmarshal(raw)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range settings {
		if _, ok := m[s.key]; !ok {
			t.Errorf("kvconnect.yaml does not show %s", s.key)
		}
	}
	for _, v := range yml.Values() {
		if !strings.HasPrefix(v.Source, "file ") {
			t.Errorf("%s comes from %s, not the file", v.Key, v.Source)
		}
	}

	vl := mustLoad(t, Options{KVTransferConfig: "@" + filepath.Join(examplesDir, "vllm-mooncake.json")})
	if vl.Config.DeviceName != "mlx5_2,mlx5_3" || vl.Config.Protocol != "rdma" || len(vl.Ignored) != 3 {
		t.Errorf("vllm-mooncake.json: %+v, ignored %v", vl.Config, vl.Ignored)
	}

	envFile, err := os.ReadFile(filepath.Join(examplesDir, "sglang.env"))
	if err != nil {
		t.Fatal(err)
	}
	env, err := ParseEnvFile("sglang.env", envFile)
	if err != nil {
		t.Fatal(err)
	}
	el := mustLoad(t, Options{Environ: env})
	if el.Config.DeviceName != "mlx5_2,mlx5_3" || el.Config.Protocol != "rdma" || el.Source("protocol") != "env MOONCAKE_PROTOCOL" {
		t.Errorf("sglang.env: %+v", el.Config)
	}
}

// TestDocsComplete: docs/CONFIG.md names every setting with its flag and
// variable, every compatible variable and every vLLM field.
func TestDocsComplete(t *testing.T) {
	b, err := os.ReadFile("../docs/CONFIG.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	var want []string
	for _, s := range settings {
		want = append(want, "`"+s.key+"`", "`"+EnvName(s.key)+"`")
		if s.flag != "" {
			want = append(want, "`--"+s.flag+"`")
		}
	}
	for _, e := range CompatEnvs() {
		want = append(want, "`"+e.Name+"`")
	}
	for f := range VLLMFields() {
		want = append(want, "`"+f+"`")
	}
	want = append(want, "`"+EnvConfigFile+"`", "`"+EnvKVTransferConfig+"`")
	sort.Strings(want)
	for _, w := range want {
		if !strings.Contains(doc, w) {
			t.Errorf("docs/CONFIG.md does not mention %s", w)
		}
	}
}
