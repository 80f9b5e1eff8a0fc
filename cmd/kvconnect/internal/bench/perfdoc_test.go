package bench

import (
	"strings"
	"testing"
)

func TestMergePerfDoc(t *testing.T) {
	run := func(cpu string, cores int) *SuiteResult {
		return &SuiteResult{Machine: Machine{CPU: cpu, Cores: cores}, Rounds: 1, Baseline: VariantRaw}
	}
	intel, amd := run("Intel Xeon", 2), run("AMD EPYC", 2)
	doc := intel.MergePerfDoc("# an old single-machine report\n")
	if strings.Contains(doc, "an old single-machine report") || !strings.Contains(doc, "<!-- machine: Intel Xeon x2 -->") {
		t.Fatalf("an old report naming no machine is not replaced by a sectioned one:\n%s", doc)
	}
	// An old report naming another machine is kept as that machine's
	// section; one naming the run's machine is replaced.
	legacy := "# kvconnect performance\n\n## Machine\n\n- CPU: Old CPU, 4 cores visible\n\n## Throughput\n\nOLD NUMBERS\n"
	kept := intel.MergePerfDoc(legacy)
	if !strings.Contains(kept, "<!-- machine: Old CPU x4 -->") || !strings.Contains(kept, "OLD NUMBERS") ||
		!strings.Contains(kept, "## Machine type: Old CPU, 4 vCPUs") || !strings.Contains(kept, "<!-- machine: Intel Xeon x2 -->") {
		t.Fatalf("an old report of another machine is not kept as its section:\n%s", kept)
	}
	if got := run("Old CPU", 4).MergePerfDoc(legacy); strings.Contains(got, "OLD NUMBERS") {
		t.Fatalf("an old report of the run's own machine is kept:\n%s", got)
	}
	doc = amd.MergePerfDoc(doc)
	if !strings.Contains(doc, "<!-- machine: Intel Xeon x2 -->") || !strings.Contains(doc, "<!-- machine: AMD EPYC x2 -->") {
		t.Fatalf("a second machine did not get a section of its own:\n%s", doc)
	}
	// The Python benchmark's part of a section survives the suite's rerun.
	py := pythonBegin + "\nPYTHON NUMBERS\n" + pythonEnd
	doc = strings.Replace(doc, endMarker("AMD EPYC x2"), py+"\n"+endMarker("AMD EPYC x2"), 1)
	intel.Machine.LoadStart = "SECOND RUN"
	again := amd.MergePerfDoc(intel.MergePerfDoc(doc))
	if strings.Count(again, "<!-- machine: ") != 2 || strings.Count(again, "PYTHON NUMBERS") != 1 || !strings.Contains(again, "SECOND RUN") {
		t.Fatalf("rerunning replaced the wrong parts:\n%s", again)
	}
	if i, j := strings.Index(again, "<!-- machine: AMD EPYC x2 -->"), strings.Index(again, "PYTHON NUMBERS"); j < i {
		t.Fatal("the Python part left its machine's section")
	}
	if strings.Contains(again, "\n# Intel") || !strings.Contains(again, "## Machine type: Intel Xeon, 2 vCPUs") {
		t.Fatal("a machine's report keeps its title instead of becoming a section")
	}
}

// TestDemoteSkipsCodeBlocks: a shell comment in a fenced code block is
// not a heading.
func TestDemoteSkipsCodeBlocks(t *testing.T) {
	got := demote("# Title\n\n## How\n\n```sh\nmake bench\n# which runs\nbin/kvconnect bench\n```\n")
	want := "## Machine type: Title\n\n### How\n\n```sh\nmake bench\n# which runs\nbin/kvconnect bench\n```\n"
	if got != want {
		t.Fatalf("demote:\n%s\nwant:\n%s", got, want)
	}
}
