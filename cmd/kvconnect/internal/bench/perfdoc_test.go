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
		t.Fatalf("an old report is not replaced by a sectioned one:\n%s", doc)
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
