package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvconnect/kvconnect/errdefs"
	"github.com/spf13/pflag"
)

// writeFile writes content to dir/name and returns the path.
func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// flags returns a flag set with the config flags, parsed from args.
func flags(t *testing.T, args ...string) *pflag.FlagSet {
	t.Helper()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	RegisterFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return fs
}

// mustLoad loads and fails the test on any problem.
func mustLoad(t *testing.T, opts Options) *Loaded {
	t.Helper()
	if opts.Environ == nil {
		opts.Environ = []string{}
	}
	l, err := Load(opts)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return l
}

// loadErr loads and returns the problems, failing if there are none.
func loadErr(t *testing.T, opts Options) (*Loaded, []*Problem) {
	t.Helper()
	if opts.Environ == nil {
		opts.Environ = []string{}
	}
	l, err := Load(opts)
	if err == nil {
		t.Fatalf("Load: no error, want problems")
	}
	if !errors.Is(err, errdefs.ErrInvalidArgument) && !errors.Is(err, errdefs.ErrNotSupported) {
		t.Errorf("error %v wraps neither ErrInvalidArgument nor ErrNotSupported", err)
	}
	ps := Problems(err)
	if len(ps) == 0 {
		t.Fatalf("Problems(%v) is empty", err)
	}
	return l, ps
}

// findProblem returns the first problem about key.
func findProblem(ps []*Problem, key string) *Problem {
	for _, p := range ps {
		if p.Key == key {
			return p
		}
	}
	return nil
}

func problemKeys(ps []*Problem) string {
	var keys []string
	for _, p := range ps {
		keys = append(keys, p.Key)
	}
	return strings.Join(keys, ",")
}

func chmodX(path string) error { return os.Chmod(path, 0o755) }
