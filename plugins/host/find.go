package host

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/kvconnect/kvconnect/errdefs"
	"github.com/kvconnect/kvconnect/internal/pluginpath"
	"github.com/kvconnect/kvconnect/internal/suggest"
)

// BinaryPrefix starts the name of every transport plugin executable:
// kvconnect-transport-<name>.
const BinaryPrefix = pluginpath.BinaryPrefix

// EnvPluginDir names a directory searched first for plugin binaries.
const EnvPluginDir = pluginpath.EnvPluginDir

// place is one path FindPlugin looks at, and why it looks there.
type place struct {
	path   string
	source string // "plugin_dir", "$KVCONNECT_PLUGIN_DIR", "beside the executable", "$PATH"
	note   string // why a file there was not used, if one exists
}

func (p place) String() string {
	s := p.path + " (" + p.source
	if p.note != "" {
		s += ": " + p.note
	}
	return s + ")"
}

// searchPlaces lists, in order and without duplicates, where
// kvconnect-transport-<name> is looked for (package pluginpath).
func searchPlaces(name, pluginDir string) []place {
	var out []place
	for _, p := range pluginpath.Places(name, pluginDir) {
		out = append(out, place{path: p.Path, source: p.Source})
	}
	return out
}

// FindPlugin looks for kvconnect-transport-<name>: in pluginDir (the
// plugin_dir setting), in $KVCONNECT_PLUGIN_DIR, beside the running
// executable, then in each directory on PATH. It returns the path and every
// path searched, in order. When nothing is found the error is an *errdefs.InitError
// (step errdefs.StepFindPlugin) wrapping errdefs.ErrUnavailable and errdefs.ErrPluginNotFound that
// names every path searched; when the only match is not executable it is an
// *errdefs.InitError (step errdefs.StepStartPlugin, EACCES) wrapping errdefs.ErrUnavailable and
// errdefs.ErrPluginStart.
func FindPlugin(name, pluginDir string) (string, []string, error) {
	path, places, err := findPlugin(name, pluginDir)
	searched := make([]string, len(places))
	for i, p := range places {
		searched[i] = p.path
	}
	return path, searched, err
}

func findPlugin(name, pluginDir string) (string, []place, error) {
	if name == "" || strings.ContainsAny(name, `/\`) || strings.HasPrefix(name, ".") {
		return "", nil, &errdefs.InitError{
			Transport: name, Step: errdefs.StepFindPlugin,
			Cause: fmt.Sprintf("%q is not a transport name", name),
			Hints: []string{"use a plain transport name such as tcp, rdma or ucx (protocol / --protocol); to run a binary at a given path, set LaunchConfig.Path"},
			Err:   errdefs.ErrInvalidArgument,
		}
	}
	places := searchPlaces(name, pluginDir)
	notExec := -1
	for i := range places {
		st, err := os.Stat(places[i].path)
		switch {
		case errors.Is(err, os.ErrNotExist):
			continue
		case err != nil:
			places[i].note = "cannot stat: " + errnoWords(err)
			continue
		case !st.Mode().IsRegular():
			places[i].note = "not a regular file"
			continue
		case st.Mode().Perm()&0o111 == 0:
			places[i].note = fmt.Sprintf("not executable, mode %v", st.Mode().Perm())
			if notExec < 0 {
				notExec = i
			}
			continue
		}
		path := places[i].path
		// A relative directory (plugin_dir: .) gives a path without a
		// slash, which exec would look up on PATH instead: run this file.
		if abs, err := filepath.Abs(path); err == nil {
			path = abs
		}
		return path, places, nil
	}
	if notExec >= 0 {
		p := places[notExec]
		st, _ := os.Stat(p.path)
		var mode os.FileMode
		if st != nil {
			mode = st.Mode().Perm()
		}
		return "", places, &errdefs.InitError{
			Transport: name, Step: errdefs.StepStartPlugin, NativeCode: errnoCode(errEACCES), NativeName: "EACCES",
			Cause: fmt.Sprintf("found %s (%s) but it is not executable (mode %v)", p.path, p.source, mode),
			Hints: []string{
				fmt.Sprintf("make it executable: chmod +x %s", p.path),
				"if it was copied from an archive or artifact store that drops permissions, reinstall it with its mode intact",
			},
			Err: fmt.Errorf("%w: %w", errdefs.ErrUnavailable, errdefs.ErrPluginStart),
		}
	}
	return "", places, notFoundError(name, places)
}

func joinPlaces(places []place) string {
	s := make([]string, len(places))
	for i, p := range places {
		s[i] = p.String()
	}
	return strings.Join(s, ", ")
}

func notFoundError(name string, places []place) *errdefs.InitError {
	bin := BinaryPrefix + name
	hints := []string{
		fmt.Sprintf("install the %s transport plugin (%s) into one of these directories, or set plugin_dir (%s) to the directory that holds it",
			name, bin, EnvPluginDir),
	}
	if others := installedPlugins(places); len(others) > 0 {
		h := "transport plugins found in these directories: " + strings.Join(others, ", ")
		if m := closest(name, others); m != "" {
			h += fmt.Sprintf(" (did you mean %q?)", m)
		}
		hints = append(hints, h)
	} else {
		hints = append(hints, "no kvconnect transport plugin was found in any of these directories: is kvconnect installed completely (make build puts them in bin/)?")
	}
	hints = append(hints, "or configure a transport that is installed (protocol), and let the fallback chain move on to it")
	return &errdefs.InitError{
		Transport: name, Step: errdefs.StepFindPlugin, NativeCode: errnoCode(errENOENT), NativeName: "ENOENT",
		Cause: fmt.Sprintf("no executable %s found; searched, in order: %s", bin, joinPlaces(places)),
		Hints: hints,
		Err:   fmt.Errorf("%w: %w", errdefs.ErrUnavailable, errdefs.ErrPluginNotFound),
	}
}

// installedPlugins lists the transport names of the plugin executables in
// the directories of places.
func installedPlugins(places []place) []string {
	seen := map[string]bool{}
	var out []string
	for _, p := range places {
		ents, err := os.ReadDir(filepath.Dir(p.path))
		if err != nil {
			continue
		}
		for _, e := range ents {
			n, ok := strings.CutPrefix(e.Name(), BinaryPrefix)
			if !ok || n == "" || seen[n] {
				continue
			}
			if info, err := e.Info(); err != nil || !info.Mode().IsRegular() || info.Mode().Perm()&0o111 == 0 {
				continue
			}
			seen[n] = true
			out = append(out, n)
		}
	}
	return out
}

func closest(name string, names []string) string { return suggest.Closest(name, names) }
