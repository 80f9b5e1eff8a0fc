// Package testbin builds the project's executables (plugin binaries, test
// helpers) for tests, once per test process, into a temporary directory.
package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
)

var (
	mu    sync.Mutex
	dir   string
	built = map[string]string{}
)

// ModuleRoot returns the directory holding go.mod, found from this file.
func ModuleRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// Build compiles the package at pkg (import path or ./relative to the
// module root) into a binary named name and returns its path. Binaries are
// built with -race when the test binary is.
func Build(pkg, name string) (string, error) {
	mu.Lock()
	defer mu.Unlock()
	key := pkg + "\x00" + name
	if p, ok := built[key]; ok {
		return p, nil
	}
	if dir == "" {
		d, err := os.MkdirTemp("", "kvconnect-testbin-")
		if err != nil {
			return "", err
		}
		dir = d
	}
	out := filepath.Join(dir, name)
	args := []string{"build", "-o", out}
	if raceEnabled {
		args = append(args, "-race")
	}
	args = append(args, pkg)
	cmd := exec.Command("go", args...)
	cmd.Dir = ModuleRoot()
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %v\n%s", pkg, err, b)
	}
	built[key] = out
	return out, nil
}

// Dir is the directory binaries are built into ("" before the first Build).
func Dir() string {
	mu.Lock()
	defer mu.Unlock()
	return dir
}

// Cleanup removes the built binaries. Call it from TestMain after m.Run.
func Cleanup() {
	mu.Lock()
	defer mu.Unlock()
	if dir != "" {
		os.RemoveAll(dir)
		dir = ""
		built = map[string]string{}
	}
}

// Gated writes an executable wrapper named name into dir that runs bin
// (with the wrapper's arguments, environment and process id, by exec)
// only while the gate is open, waiting while it is closed: a test closes
// the gate to hold a restart of a plugin at its launch, and opens it to
// let the restart go on. It returns the wrapper's path and the gate's
// open and close functions; the gate starts open.
func Gated(dir, name, bin string) (path string, open, closeGate func() error, err error) {
	gate := filepath.Join(dir, name+".gate")
	path = filepath.Join(dir, name)
	script := fmt.Sprintf("#!/bin/sh\n# waits while %[1]s is missing, then runs %[2]s\nwhile [ ! -e '%[1]s' ]; do sleep 0.01; done\nexec '%[2]s' \"$@\"\n", gate, bin)
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		return "", nil, nil, err
	}
	open = func() error { return os.WriteFile(gate, nil, 0o644) }
	closeGate = func() error { return os.Remove(gate) }
	return path, open, closeGate, open()
}
