package bench

import (
	"fmt"
	"strings"
)

// The performance document keeps one section per machine type, so a run
// on one CPU replaces its own numbers and leaves the others': a
// regression on one machine cannot hide behind another's numbers. A
// section runs from its begin marker to its end marker; the Python
// engine's benchmark (python/bench/bench_engine.py) writes its part inside
// the section of its machine, between its own markers.
const perfDocHead = `# kvconnect performance

Measured by ` + "`make bench`" + `: ` + "`kvconnect bench --suite`" + ` on loopback, then the Python engine
(` + "`python/bench/bench_engine.py`" + `). Throughput is in GB/s (1 GB = 1e9 B). One section per machine
type measured (the CPU's model name, family and model, and the vCPUs: a
hypervisor may call different CPUs by one name); a run replaces its own
machine's section and keeps the others.
`

// MachineKey names a machine type: the CPU (its model name, family and
// model: Machine.CPUType) and the processors visible.
// python/bench/bench_engine.py computes the same.
func MachineKey(m Machine) string { return fmt.Sprintf("%s x%d", m.CPUType(), m.Cores) }

// nameOnlyKey is the key sections had before they named the CPU's
// family and model: the model name and the processors visible.
func nameOnlyKey(m Machine) string { return fmt.Sprintf("%s x%d", m.CPU, m.Cores) }

func beginMarker(key string) string { return "<!-- machine: " + key + " -->" }
func endMarker(key string) string   { return "<!-- /machine: " + key + " -->" }

// MergePerfDoc returns doc with the section of the run's machine replaced
// by (or, for a machine not there yet, extended with) the run's report.
// The Python benchmark's part of that section, if any, is kept until the
// Python benchmark replaces it. A section keyed by the model name alone
// (written before keys named the family and model) is the run's when
// the run's machine has no section of its own and its model name and
// processors match: its markers take the run's key. A document without
// sections (an older one) becomes the section of the machine it names,
// unless that is the run's.
func (res *SuiteResult) MergePerfDoc(doc string) string {
	key := MachineKey(res.Machine)
	var b strings.Builder
	res.WriteMarkdown(&b, true)
	section := beginMarker(key) + "\n" + demote(b.String())
	begin, end := beginMarker(key), endMarker(key)
	i, j := strings.Index(doc, begin), strings.Index(doc, end)
	if old := nameOnlyKey(res.Machine); old != key && (i < 0 || j < i) {
		if oi, oj := strings.Index(doc, beginMarker(old)), strings.Index(doc, endMarker(old)); oi >= 0 && oj > oi {
			i, j = oi, oj
			doc = doc[:j] + end + doc[j+len(endMarker(old)):]
		}
	}
	if i >= 0 && j > i {
		old := doc[i:j]
		if k := strings.Index(old, pythonBegin); k >= 0 {
			if l := strings.Index(old, pythonEnd); l > k {
				section = strings.TrimRight(section, "\n") + "\n\n" + old[k:l+len(pythonEnd)] + "\n"
			}
		}
		return doc[:i] + strings.TrimRight(section, "\n") + "\n" + doc[j:]
	}
	if !strings.Contains(doc, "<!-- machine: ") {
		doc = perfDocHead + legacySection(doc, key)
	}
	return strings.TrimRight(doc, "\n") + "\n\n" + strings.TrimRight(section, "\n") + "\n" + end + "\n"
}

// legacySection turns a report written before the document had sections
// into the section of the machine it names ("- CPU: <model>, <n> cores
// visible"), so its numbers are kept; "" when it names none, or names the
// machine of the run replacing it (runKey).
func legacySection(doc, runKey string) string {
	var cpu string
	var cores int
	for _, l := range strings.Split(doc, "\n") {
		if rest, ok := strings.CutPrefix(l, "- CPU: "); ok {
			if i := strings.LastIndex(rest, ", "); i > 0 {
				if _, err := fmt.Sscanf(rest[i+2:], "%d cores visible", &cores); err == nil {
					cpu = rest[:i]
				}
			}
			break
		}
	}
	key := fmt.Sprintf("%s x%d", cpu, cores)
	if cpu == "" || key == runKey {
		return ""
	}
	body := doc
	if strings.HasPrefix(body, "# ") {
		if i := strings.IndexByte(body, '\n'); i >= 0 {
			body = body[i+1:]
		}
	}
	title := fmt.Sprintf("# %s, %d vCPUs (a report from before this document had sections)\n", cpu, cores)
	return "\n" + beginMarker(key) + "\n" + demote(title+body) + "\n" + endMarker(key) + "\n"
}

const (
	pythonBegin = "<!-- python-bench:begin -->"
	pythonEnd   = "<!-- python-bench:end -->"
)

// demote turns a standalone report into a machine section: its title
// becomes the machine's heading, every other heading one level deeper.
func demote(report string) string {
	lines := strings.Split(report, "\n")
	fenced := false
	for i, l := range lines {
		switch {
		case strings.HasPrefix(l, "```"):
			fenced = !fenced
		case fenced: // a shell comment in a code block is no heading
		case strings.HasPrefix(l, "# "):
			lines[i] = "## Machine type: " + strings.TrimPrefix(l, "# ")
		case strings.HasPrefix(l, "#"):
			lines[i] = "#" + l
		}
	}
	return strings.Join(lines, "\n")
}
