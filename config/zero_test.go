package config

import (
	"testing"
)

// TestZeroWrittenIsAProblem: a timeout, TTL or handshake bound written as
// 0 in a file, the environment or a flag is refused with where it came
// from (it would silently mean the default); left unset, or zero in a
// Config built in code, it is the default.
func TestZeroWrittenIsAProblem(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		name string
		key  string
		opts Options
	}{
		{"file ttl", "metadata_ttl", Options{ConfigFile: writeFile(t, dir, "ttl.yaml", "metadata_ttl: 0s\n"), Environ: []string{}}},
		{"file frame", "max_handshake_frame", Options{ConfigFile: writeFile(t, dir, "frame.yaml", "max_handshake_frame: 0\n"), Environ: []string{}}},
		{"Mooncake env", "transfer_timeout", Options{Environ: []string{"MC_TRANSFER_TIMEOUT=0"}}},
		{"env rounded to 0", "connect_timeout", Options{Environ: []string{"KVCONNECT_CONNECT_TIMEOUT=0.0000000001"}}},
		{"flag", "plugin_start_timeout", Options{Flags: flags(t, "--plugin-start-timeout", "0s"), Environ: []string{}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Load(c.opts)
			var found *Problem
			for _, p := range Problems(err) {
				if p.Key == c.key {
					found = p
				}
			}
			if found == nil || found.Source == "" || found.Allowed == "" {
				t.Fatalf("problems %v: want one for %s naming its source and what is allowed", Problems(err), c.key)
			}
		})
	}
	for _, opts := range []Options{{Environ: []string{}}, {Base: &Config{Protocol: "tcp"}, Environ: []string{}}} {
		if _, err := Load(opts); err != nil {
			t.Errorf("Load(%+v) with nothing written as 0: %v", opts, err)
		}
	}
}
