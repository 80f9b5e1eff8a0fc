package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/kvconnect/kvconnect/internal/testbin"
)

func TestEmbeddingExampleRuns(t *testing.T) {
	if _, err := testbin.Build("./cmd/kvconnect-transport-tcp", "kvconnect-transport-tcp"); err != nil {
		t.Fatal(err)
	}
	bin, err := testbin.Build("./examples/embedding", "embedding")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "KVCONNECT_PLUGIN_DIR=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("example failed: %v\n%s", err, out)
	}
	for _, want := range []string{"first op COMPLETED", `notification "kv_ready"`, `"fallback": true`, `"transport": "tcp"`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestMain(m *testing.M) {
	testbin.Main(m)
}
