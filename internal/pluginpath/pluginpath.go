// Package pluginpath says where a transport plugin's executable,
// kvconnect-transport-<name>, is looked for: the plugin_dir setting,
// $KVCONNECT_PLUGIN_DIR, beside the running executable, then each
// absolute directory on $PATH. It is a leaf (the standard library only):
// the plugin host launches what it finds there, and configuration checks
// transport names against it without linking the launcher.
package pluginpath

import (
	"os"
	"path/filepath"
)

// BinaryPrefix starts the name of every transport plugin executable:
// kvconnect-transport-<name>.
const BinaryPrefix = "kvconnect-transport-"

// EnvPluginDir names a directory searched first for plugin binaries.
const EnvPluginDir = "KVCONNECT_PLUGIN_DIR"

// Place is one path a plugin is looked for at.
type Place struct {
	Path   string
	Source string // "plugin_dir", "$KVCONNECT_PLUGIN_DIR", "beside the executable", "$PATH"
}

// Places lists, in search order and without duplicates, where
// kvconnect-transport-<name> is looked for. pluginDir is the plugin_dir
// setting ("" = none).
func Places(name, pluginDir string) []Place {
	bin := BinaryPrefix + name
	var out []Place
	seen := map[string]bool{}
	add := func(dir, source string) {
		if dir == "" {
			return
		}
		p := filepath.Join(dir, bin)
		if seen[p] {
			return
		}
		seen[p] = true
		out = append(out, Place{Path: p, Source: source})
	}
	add(pluginDir, "plugin_dir")
	add(os.Getenv(EnvPluginDir), "$"+EnvPluginDir)
	if exe, err := os.Executable(); err == nil {
		add(filepath.Dir(exe), "beside the executable")
	}
	for _, d := range filepath.SplitList(os.Getenv("PATH")) {
		if filepath.IsAbs(d) { // like exec.LookPath, never run from a relative PATH entry
			add(d, "$PATH")
		}
	}
	return out
}

// Installed reports whether an executable regular file
// kvconnect-transport-<name> is at one of Places(name, pluginDir).
func Installed(name, pluginDir string) bool {
	for _, p := range Places(name, pluginDir) {
		if Executable(p.Path) {
			return true
		}
	}
	return false
}

// Executable reports whether path is a regular file with an execute bit.
func Executable(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o111 != 0
}
