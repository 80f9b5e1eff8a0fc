package soak_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kvconnect/kvconnect/internal/testbin"
	"github.com/kvconnect/kvconnect/test/soak"
)

var (
	duration = flag.Duration("soak.duration", 25*time.Second, "how long to inject faults (make soak: SOAK_DURATION)")
	report   = flag.String("soak.report", "", "also write the report (markdown) to this file")
	seed     = flag.Uint64("soak.seed", 0, "fault schedule seed (0: random)")
)

// durationSet reports whether -soak.duration was given.
func durationSet() (set bool) {
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "soak.duration" })
	return set
}

func TestMain(m *testing.M) {
	testbin.Main(m)
}

// TestSoak moves verified blocks while faults are injected and checks the
// guarantees: no corrupted block, every kind of fault injected and
// recovered from, no hostile write landed, nothing leaked.
func TestSoak(t *testing.T) {
	if !durationSet() { // make soak sets it
		testbin.Long(t, fmt.Sprintf("a %v soak under the race detector", *duration))
	}
	cli, err := testbin.Build("./cmd/kvconnect", "kvconnect")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := testbin.Build("./cmd/kvconnect-transport-tcp", "kvconnect-transport-tcp"); err != nil {
		t.Fatal(err)
	}
	rep, err := soak.Run(context.Background(), soak.Config{Duration: *duration, CLI: cli, PluginDir: filepath.Dir(cli),
		BinDir: testbin.Dir(), Auth: true, Seed: *seed})
	if err != nil {
		t.Fatal(err)
	}
	md := rep.Markdown()
	t.Log("\n" + md)
	if *report != "" {
		if err := os.WriteFile(*report, []byte(md), 0o644); err != nil {
			t.Error(err)
		}
	}
	if !rep.OK() {
		t.Errorf("the soak failed its guarantees (see the report)")
		if rep.Leaks.Stacks != "" {
			t.Logf("goroutines:\n%s", rep.Leaks.Stacks)
		}
	}
	for _, f := range rep.Faults {
		if f.Count == 0 && rep.Rounds > 0 {
			t.Errorf("no %s was injected in %d rounds", f.Kind, rep.Rounds)
		}
		if len(f.Failed) > 0 {
			t.Errorf("injecting %s failed: %v", f.Kind, f.Failed)
		}
	}
}
