package bench

import (
	"os"
	"os/exec"
	"path/filepath"
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

// TestMergePerfDocTellsCPUFamiliesApart: two machines a hypervisor shows
// under one model name get a section each, and a section from before
// keys named the family and model becomes the section of the first run
// whose model name and processors match, Python part and all.
func TestMergePerfDocTellsCPUFamiliesApart(t *testing.T) {
	run := func(family, model string) *SuiteResult {
		return &SuiteResult{Machine: Machine{CPU: "AMD EPYC", Family: family, Model: model, Cores: 2}, Rounds: 1, Baseline: VariantRaw}
	}
	zen1, zen5 := run("23", "1"), run("26", "2")
	if MachineKey(zen1.Machine) == MachineKey(zen5.Machine) {
		t.Fatalf("one key for two CPU families: %q", MachineKey(zen1.Machine))
	}
	doc := zen5.MergePerfDoc(zen1.MergePerfDoc(""))
	for _, key := range []string{"AMD EPYC (family 23, model 1) x2", "AMD EPYC (family 26, model 2) x2"} {
		if strings.Count(doc, beginMarker(key)) != 1 || strings.Count(doc, endMarker(key)) != 1 {
			t.Fatalf("no section of its own for %s:\n%s", key, doc)
		}
	}
	if !strings.Contains(doc, "## Machine type: AMD EPYC (family 26, model 2), 2 vCPUs") ||
		!strings.Contains(doc, "- CPU: AMD EPYC (family 26, model 2), 2 cores visible") {
		t.Fatalf("the section does not name the family and model:\n%s", doc)
	}

	old := "AMD EPYC x2"
	legacy := perfDocHead + "\n" + beginMarker(old) + "\n## Machine type: AMD EPYC, 2 vCPUs\n\nOLD NUMBERS\n\n" +
		pythonBegin + "\nPYTHON NUMBERS\n" + pythonEnd + "\n" + endMarker(old) + "\n"
	got := zen5.MergePerfDoc(legacy)
	key := MachineKey(zen5.Machine)
	if strings.Contains(got, "OLD NUMBERS") || strings.Contains(got, old+" -->") ||
		strings.Count(got, beginMarker(key)) != 1 || strings.Count(got, endMarker(key)) != 1 || strings.Count(got, "PYTHON NUMBERS") != 1 {
		t.Fatalf("a name-only section did not become the matching run's:\n%s", got)
	}
	if i, j, k := strings.Index(got, beginMarker(key)), strings.Index(got, "PYTHON NUMBERS"), strings.Index(got, endMarker(key)); i >= j || j >= k {
		t.Fatalf("the Python part left its machine's section:\n%s", got)
	}
	// Once a section of its own exists, a name-only one is left alone.
	both := strings.Replace(got, perfDocHead, perfDocHead+"\n"+beginMarker(old)+"\nOLD NUMBERS\n"+endMarker(old)+"\n", 1)
	if again := zen5.MergePerfDoc(both); !strings.Contains(again, "OLD NUMBERS") || strings.Count(again, beginMarker(key)) != 1 {
		t.Fatalf("a name-only section was taken over beside the run's own:\n%s", again)
	}
}

// TestPythonBenchNamesTheSameMachine: the Python engine's benchmark
// writes into the section the suite wrote, so both name this machine
// alike.
func TestPythonBenchNamesTheSameMachine(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not installed")
	}
	cmd := exec.Command(py, "-c", "import bench_engine; print(bench_engine.machine_key())")
	cmd.Env = append(os.Environ(), "PYTHONPATH="+filepath.Join("..", "..", "..", "..", "python", "bench"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("bench_engine.machine_key: %v\n%s", err, out)
	}
	if got, want := strings.TrimSpace(string(out)), MachineKey(DescribeMachine()); got != want {
		t.Fatalf("the Python benchmark names this machine %q, the suite %q", got, want)
	}
}
