package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// runCLI runs the kvconnect command in-process with env as its whole
// environment and returns its output and error.
func runConfigCLI(t *testing.T, env []string, args ...string) (string, error) {
	t.Helper()
	old := environ
	environ = func() []string { return env }
	defer func() { environ = old }()
	root := newRootCommand()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}

func writeTemp(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestConfigShowSources: MOONCAKE_PROTOCOL=tcp in the environment beats
// protocol: rdma in a file, and show --sources says so.
func TestConfigShowSources(t *testing.T) {
	file := writeTemp(t, "kvconnect.yaml", "protocol: rdma\nrpc_port: 15001\n")
	out, err := runConfigCLI(t, []string{"MOONCAKE_PROTOCOL=tcp"}, "config", "show", "--config", file, "--sources")
	if err != nil {
		t.Fatalf("config show: %v\n%s", err, out)
	}
	for _, re := range []string{
		`(?m)^KEY\s+VALUE\s+SOURCE$`,
		`(?m)^protocol\s+tcp\s+env MOONCAKE_PROTOCOL$`,
		`(?m)^rpc_port\s+15001\s+file kvconnect.yaml$`,
		`(?m)^hostname\s+""\s+default$`,
		`(?m)^fallback\s+\(default chain for the protocol\)\s+default$`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("output does not match %s:\n%s", re, out)
		}
	}
	// Without --sources: values only.
	out, err = runConfigCLI(t, []string{"MOONCAKE_PROTOCOL=tcp"}, "config", "show", "--config", file)
	if err != nil || !regexp.MustCompile(`(?m)^protocol\s+tcp$`).MatchString(out) || strings.Contains(out, "env MOONCAKE_PROTOCOL") {
		t.Errorf("show without --sources: %v\n%s", err, out)
	}
}

// TestConfigShowNotesAndIgnored: conflicts resolved and ignored vLLM
// fields are listed.
func TestConfigShowNotesAndIgnored(t *testing.T) {
	file := writeTemp(t, "kvconnect.yaml", "protocol: rdma\n")
	out, err := runConfigCLI(t, []string{"MC_FORCE_TCP=1"}, "config", "show", "--config", file,
		"--kv-transfer-config", `{"kv_connector":"MooncakeConnector","kv_parallel_size":2}`)
	if err != nil {
		t.Fatalf("config show: %v\n%s", err, out)
	}
	for _, want := range []string{
		`MC_FORCE_TCP=1 forces protocol tcp (was "rdma" from file kvconnect.yaml)`,
		"ignored (vLLM fields with no meaning for kvconnect):",
		"kv_parallel_size = 2",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// TestConfigShowJSON: --json carries values with sources, notes,
// ignored fields, warnings and problems.
func TestConfigShowJSON(t *testing.T) {
	out, err := runConfigCLI(t, []string{"MOONCAKE_PROTOCOL=ucx", "MOONCAKE_DEVICE=" + `{"0":"mlx5_0","1":"mlx5_1"}`},
		"config", "show", "--json", "--local-device-index", "1")
	if err != nil {
		t.Fatalf("config show --json: %v\n%s", err, out)
	}
	var doc struct {
		Values []struct {
			Key    string `json:"key"`
			Value  any    `json:"value"`
			Source string `json:"source"`
			Raw    any    `json:"raw"`
		} `json:"values"`
		Notes    []string `json:"notes"`
		Problems []any    `json:"problems"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	got := map[string]string{}
	for _, v := range doc.Values {
		got[v.Key] = v.Source
		if v.Key == "device_name" && (v.Value != "mlx5_1" || v.Raw == nil) {
			t.Errorf("device_name = %+v", v)
		}
	}
	if got["protocol"] != "env MOONCAKE_PROTOCOL" || got["local_device_index"] != "flag --local-device-index" {
		t.Errorf("sources %v", got)
	}
	if len(doc.Problems) != 0 {
		t.Errorf("problems %v", doc.Problems)
	}
}

// TestConfigShowProblems: show on a bad configuration lists the problems
// and fails.
func TestConfigShowProblems(t *testing.T) {
	out, err := runConfigCLI(t, []string{"KVCONNECT_ROLE=kv_prodcuer"}, "config", "show")
	if err == nil || !strings.Contains(out, "problems:") || !strings.Contains(out, `did you mean "kv_producer"?`) {
		t.Errorf("err %v, output:\n%s", err, out)
	}
}

// TestConfigCheckThreeMistakes: every problem is printed, with
// suggestions, and the command fails (exit status 1 from main).
func TestConfigCheckThreeMistakes(t *testing.T) {
	file := writeTemp(t, "bad.yaml", "protocol: rdam\nrole: kv_prodcuer\ndevcie_name: mlx5_0\n")
	out, err := runConfigCLI(t, []string{"MOONCAKE_PROTOCOL=tcp"}, "config", "check", file)
	var ee exitError
	if !errors.As(err, &ee) || ee.code != 1 {
		t.Fatalf("config check = %v, want exit status 1:\n%s", err, out)
	}
	for _, want := range []string{
		file + ": 3 problems",
		`protocol = "rdam" (from file bad.yaml)`, `did you mean "rdma"?`,
		`role = "kv_prodcuer" (from file bad.yaml)`, `did you mean "kv_producer"?`,
		`devcie_name (from file bad.yaml): unknown key`, `did you mean "device_name"?`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// TestConfigCheckKinds: check reads kvconnect files, vLLM JSON and env
// files for what they are, and the example configs are all valid.
func TestConfigCheckKinds(t *testing.T) {
	examples, err := filepath.Glob("../../examples/configs/*")
	if err != nil || len(examples) < 4 {
		t.Fatalf("examples: %v %v", examples, err)
	}
	out, err := runConfigCLI(t, nil, append([]string{"config", "check"}, examples...)...)
	if err != nil {
		t.Fatalf("config check of the examples: %v\n%s", err, out)
	}
	if n := strings.Count(out, ": ok\n"); n != len(examples) {
		t.Errorf("%d of %d examples ok:\n%s", n, len(examples), out)
	}
	vllm := writeTemp(t, "vllm.json", `{"kv_connector":"NixlConnector","kv_role":"kv_producer"}`)
	env := writeTemp(t, "bad.env", "MOONCAKE_PROTOCOL=rdam\nnot an assignment\n")
	own := writeTemp(t, "own.json", `{"protocol":"tcp","kv_rol":"x"}`)
	out, err = runConfigCLI(t, nil, "config", "check", vllm, env, own)
	if err == nil {
		t.Fatalf("check succeeded:\n%s", out)
	}
	for _, want := range []string{
		"kv_connector = \"NixlConnector\"", "MooncakeConnector",
		"file bad.env line 2", `protocol = "rdam" (from env MOONCAKE_PROTOCOL)`,
		"kv_rol (from file own.json): unknown key",
		"3 files have problems",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// TestConfigCheckEffective: without files, check validates what the
// commands would load.
func TestConfigCheckEffective(t *testing.T) {
	out, err := runConfigCLI(t, []string{"MOONCAKE_PROTOCOL=tcp"}, "config", "check")
	if err != nil || !strings.Contains(out, "effective configuration: ok") {
		t.Errorf("err %v:\n%s", err, out)
	}
	out, err = runConfigCLI(t, nil, "config", "check", "--protocol", "rdam")
	if err == nil || !strings.Contains(out, `did you mean "rdma"?`) {
		t.Errorf("err %v:\n%s", err, out)
	}
}

// TestLoadConfigFlags: every command inherits the config flags, and
// loadConfig reads them with the environment.
func TestLoadConfigFlags(t *testing.T) {
	root := newRootCommand()
	for _, c := range root.Commands() {
		for _, name := range []string{"config", "kv-transfer-config", "set", "protocol", "fallback", "device-name"} {
			if c.InheritedFlags().Lookup(name) == nil {
				t.Errorf("%s does not take --%s", c.Name(), name)
			}
		}
	}
	old := environ
	environ = func() []string { return []string{"KVCONNECT_ENGINE_ID=e7", "MOONCAKE_PROTOCOL=rdma"} }
	defer func() { environ = old }()
	serve, _, err := root.Find([]string{"serve"})
	if err != nil {
		t.Fatal(err)
	}
	if err := serve.ParseFlags([]string{"--protocol", "ucx", "--set", "transports.ucx.tls=tcp"}); err != nil {
		t.Fatal(err)
	}
	loaded, _, err := loadConfig(serve)
	if err != nil {
		t.Fatal(err)
	}
	c := loaded.Config
	if c.Protocol != "ucx" || c.EngineID != "e7" || c.Transports["ucx"]["tls"] != "tcp" {
		t.Errorf("loadConfig: %+v", c)
	}
}

// TestConfigShowHidesPasswords: config show (text and JSON) never prints
// the metadata password, whether set directly, through MC_REDIS_PASSWORD
// or inside the metadata URL.
func TestConfigShowHidesPasswords(t *testing.T) {
	env := []string{"KVCONNECT_METADATA=redis://:urlsecret@10.0.0.5:6379/1", "MC_REDIS_PASSWORD=envsecret",
		"KVCONNECT_METADATA_PASSWORD=kvsecret"}
	for _, args := range [][]string{{"config", "show", "--sources"}, {"config", "show", "--json"}, {"config", "check"}} {
		out, err := runConfigCLI(t, env, args...)
		if err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
		for _, secret := range []string{"urlsecret", "envsecret", "kvsecret"} {
			if strings.Contains(out, secret) {
				t.Errorf("%v prints %s:\n%s", args, secret, out)
			}
		}
		if args[1] == "show" && !strings.Contains(out, "(hidden)") {
			t.Errorf("%v does not show that a password is set:\n%s", args, out)
		}
	}
	out, _ := runConfigCLI(t, env, "config", "show", "--sources")
	if !regexp.MustCompile(`(?m)^metadata_password\s+\(hidden\)\s+env KVCONNECT_METADATA_PASSWORD$`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^metadata\s+redis://:xxxxx@10\.0\.0\.5:6379/1\s+env KVCONNECT_METADATA$`).MatchString(out) {
		t.Errorf("config show --sources:\n%s", out)
	}
}

// TestConfigWithoutASubcommandFails: `config` alone, a misspelled
// subcommand, `config check ""` (an unset variable in a script) and
// configuration flags beside named files (which apply to none of them)
// fail instead of printing help, or "ok", and exiting 0.
func TestConfigWithoutASubcommandFails(t *testing.T) {
	f := writeTemp(t, "ok.yaml", "protocol: tcp\n")
	for _, args := range [][]string{{"config"}, {"config", "chek"}, {"config", "check", ""},
		{"config", "check", "--set", "bogus=1", f}, {"config", "check", "--protocol", "rdam", f}} {
		out, err := runConfigCLI(t, nil, args...)
		if err == nil {
			t.Errorf("kvconnect %q succeeded:\n%s", args, out)
		}
	}
}
