package metrics

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.yaml.in/yaml/v3"
)

// metricNames lists every metric a node exposes, from the collectors'
// descriptors.
func metricNames(t *testing.T) []string {
	t.Helper()
	ch := make(chan *prometheus.Desc, 256)
	n := NewNode(SourceFunc(func() Snapshot { return Snapshot{} }), Options{})
	n.Describe(ch)
	c := newChainCounters()
	for _, v := range []*prometheus.CounterVec{c.attempts, c.fallbacks, c.strict} {
		v.Describe(ch)
	}
	close(ch)
	re := regexp.MustCompile(`fqName: "([^"]+)"`)
	var names []string
	for d := range ch {
		m := re.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("no name in %s", d)
		}
		names = append(names, m[1])
	}
	sort.Strings(names)
	if len(names) < 30 {
		t.Fatalf("only %d metrics: %v", len(names), names)
	}
	return names
}

var metricRef = regexp.MustCompile(`kvconnect_[a-z_]+`)

// known says whether ref names a metric (a histogram's series included).
func known(names []string, ref string) bool {
	for _, n := range names {
		if ref == n || ref == n+"_bucket" || ref == n+"_sum" || ref == n+"_count" {
			return true
		}
		if strings.HasSuffix(ref, "_") && strings.HasPrefix(n, ref) { // a family of names: kvconnect_served_*
			return true
		}
	}
	return false
}

// TestDocsListEveryMetric: docs/OBSERVABILITY.md lists every metric the
// node exposes, each in its own table row, and names no metric that does
// not exist.
func TestDocsListEveryMetric(t *testing.T) {
	names := metricNames(t)
	b, err := os.ReadFile("../docs/OBSERVABILITY.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for _, n := range names {
		if !strings.Contains(doc, "| `"+n+"` |") {
			t.Errorf("docs/OBSERVABILITY.md has no table row for %s", n)
		}
	}
	for _, ref := range metricRef.FindAllString(doc, -1) {
		if !known(names, ref) {
			t.Errorf("docs/OBSERVABILITY.md names %s, which no node exposes", ref)
		}
	}
}

// TestExamples: the alert rules and the Grafana dashboard in
// examples/observability parse and use only metrics that exist; with
// promtool installed, the rules pass promtool's check and their unit
// tests.
func TestExamples(t *testing.T) {
	names := metricNames(t)
	dir := "../examples/observability"
	raw, err := os.ReadFile(filepath.Join(dir, "alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Expr        string            `yaml:"expr"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(raw, &rules); err != nil {
		t.Fatalf("alerts.yaml: %v", err)
	}
	alerts := map[string]bool{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			alerts[r.Alert] = true
			if r.Expr == "" || r.Annotations["summary"] == "" {
				t.Errorf("alert %s: no expr or summary", r.Alert)
			}
			for _, ref := range metricRef.FindAllString(r.Expr, -1) {
				if !known(names, ref) {
					t.Errorf("alert %s uses %s, which no node exposes", r.Alert, ref)
				}
			}
		}
	}
	for _, a := range []string{"KVConnectFallbackActive", "KVConnectPluginRestarting", "KVConnectTransferFailures", "KVConnectPeerSuspect"} {
		if !alerts[a] {
			t.Errorf("alerts.yaml has no %s", a)
		}
	}

	raw, err = os.ReadFile(filepath.Join(dir, "grafana-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Title  string `json:"title"`
		Panels []struct {
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("grafana-dashboard.json: %v", err)
	}
	used := map[string]bool{}
	for _, p := range dash.Panels {
		if p.Type != "row" && len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			if !strings.Contains(q.Expr, `instance=~"$instance"`) {
				t.Errorf("panel %q: %s is not per node ($instance)", p.Title, q.Expr)
			}
			for _, ref := range metricRef.FindAllString(q.Expr, -1) {
				used[strings.TrimSuffix(ref, "_bucket")] = true
				if !known(names, ref) {
					t.Errorf("panel %q uses %s, which no node exposes", p.Title, ref)
				}
			}
		}
	}
	for _, m := range []string{"kvconnect_initiated_bytes_total", "kvconnect_served_bytes_total", "kvconnect_batch_duration_seconds",
		"kvconnect_initiated_ops_total", "kvconnect_fallbacks_total"} {
		if !used[m] {
			t.Errorf("the dashboard does not show %s (throughput, latency, failures, fallbacks)", m)
		}
	}

	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Log("promtool is not installed: alert rules checked for syntax and names only")
		return
	}
	for _, args := range [][]string{{"check", "rules", "alerts.yaml"}, {"test", "rules", "alerts_test.yaml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}
