package config

import (
	"path/filepath"
	"testing"
)

// TestConfigFileSourceNamed: a config file that cannot be read is
// reported with where its path came from: Options.ConfigFile, or what the
// caller names (a command's argument), never a --config flag nobody set.
func TestConfigFileSourceNamed(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing.yaml")
	for _, c := range []struct {
		opts Options
		want string
	}{
		{Options{ConfigFile: missing, Environ: []string{}}, "Options.ConfigFile"},
		{Options{ConfigFile: missing, ConfigFileSource: "argument", Environ: []string{}}, "argument"},
		{Options{Flags: flags(t, "--config", missing), Environ: []string{}}, "flag --config"},
	} {
		_, err := Load(c.opts)
		ps := Problems(err)
		if len(ps) != 1 || ps[0].Source != c.want {
			t.Errorf("Load(%+v): problems %v, want one from %q", c.opts, ps, c.want)
		}
	}
}
