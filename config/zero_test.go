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

// TestMCForceHCAMeansNoFallback: Mooncake's MC_FORCE_HCA=1 (fail rather
// than fall back to TCP without RDMA devices) is strict mode, with its
// source; KVCONNECT_FALLBACK overrides it; a value that is not a boolean
// is a problem naming the variable.
func TestMCForceHCAMeansNoFallback(t *testing.T) {
	ld, err := Load(Options{Environ: []string{"MOONCAKE_PROTOCOL=rdma", "MC_FORCE_HCA=1"}})
	if err != nil {
		t.Fatal(err)
	}
	if fb := ld.Config.Fallback; fb == nil || len(fb) != 0 {
		t.Fatalf("fallback %#v with MC_FORCE_HCA=1, want [] (strict)", fb)
	}
	if ld, err = Load(Options{Environ: []string{"MC_FORCE_HCA=0"}}); err != nil || ld.Config.Fallback != nil {
		t.Fatalf("MC_FORCE_HCA=0: fallback %#v, %v; want unset", ld.Config.Fallback, err)
	}
	if ld, err = Load(Options{Environ: []string{"MC_FORCE_HCA=1", "KVCONNECT_FALLBACK=tcp"}}); err != nil || len(ld.Config.Fallback) != 1 {
		t.Fatalf("KVCONNECT_FALLBACK over MC_FORCE_HCA: fallback %#v, %v; want [tcp]", ld.Config.Fallback, err)
	}
	_, err = Load(Options{Environ: []string{"MC_FORCE_HCA=maybe"}})
	if ps := Problems(err); len(ps) != 1 || ps[0].Key != "MC_FORCE_HCA" {
		t.Fatalf("MC_FORCE_HCA=maybe: %v, want a problem naming it", err)
	}
}
