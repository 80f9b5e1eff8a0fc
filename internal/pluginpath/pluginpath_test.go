package pluginpath

import (
	"os"
	"path/filepath"
	"testing"
)

func TestPlacesAndInstalled(t *testing.T) {
	dir, env := t.TempDir(), t.TempDir()
	t.Setenv(EnvPluginDir, env)
	t.Setenv("PATH", "relative/bin"+string(filepath.ListSeparator)+dir)
	ps := Places("acme", dir)
	if len(ps) < 2 || ps[0] != (Place{filepath.Join(dir, BinaryPrefix+"acme"), "plugin_dir"}) ||
		ps[1] != (Place{filepath.Join(env, BinaryPrefix+"acme"), "$" + EnvPluginDir}) {
		t.Fatalf("Places = %v", ps)
	}
	for _, p := range ps[2:] {
		if p.Path == ps[0].Path || !filepath.IsAbs(p.Path) {
			t.Errorf("a duplicate or a relative PATH entry: %v", ps)
		}
	}
	if Installed("acme", dir) {
		t.Fatal("Installed with no file")
	}
	bin := filepath.Join(env, BinaryPrefix+"acme")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if Installed("acme", dir) {
		t.Fatal("Installed with a file that is not executable")
	}
	if err := os.Chmod(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if !Installed("acme", dir) {
		t.Fatal("not Installed with an executable in $" + EnvPluginDir)
	}
}
