// Package metricstest scrapes and reads Prometheus metrics in tests and
// benchmarks (kvconnect bench reads its nodes' endpoints with it): a
// real HTTP GET of a /metrics endpoint, parsed with the Prometheus text
// parser (expfmt, UTF-8 name validation), and lookups of a series'
// value by name and labels.
package metricstest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Families are parsed metric families by name.
type Families map[string]*dto.MetricFamily

// Parse reads the Prometheus text format.
func Parse(r io.Reader) (Families, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("metricstest: parsing the text format: %w", err)
	}
	return fams, nil
}

// Scrape GETs url (http://host:port/metrics) and parses the answer,
// within 10 s.
func Scrape(ctx context.Context, url string) (Families, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return ScrapeWith(ctx, http.DefaultClient, url)
}

// ScrapeWith is Scrape with the caller's client and no bound but ctx's.
func ScrapeWith(ctx context.Context, client *http.Client, url string) (Families, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("metricstest: GET %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return nil, fmt.Errorf("metricstest: GET %s: %s: %s", url, resp.Status, b)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		return nil, fmt.Errorf("metricstest: GET %s: Content-Type %q, want the text format", url, ct)
	}
	return Parse(resp.Body)
}

// Get is the value of the series of family name whose labels include
// every pair of labels ("key", "value", ...), summed when several match;
// found is false when none does. A histogram's value is its sample count.
func (f Families) Get(name string, labels ...string) (v float64, found bool) {
	fam := f[name]
	if fam == nil {
		return 0, false
	}
	for _, m := range fam.Metric {
		if !matches(m, labels) {
			continue
		}
		found = true
		switch {
		case m.Counter != nil:
			v += m.Counter.GetValue()
		case m.Gauge != nil:
			v += m.Gauge.GetValue()
		case m.Histogram != nil:
			v += float64(m.Histogram.GetSampleCount())
		case m.Untyped != nil:
			v += m.Untyped.GetValue()
		}
	}
	return v, found
}

// Value is Get without found: 0 when no series matches.
func (f Families) Value(name string, labels ...string) float64 {
	v, _ := f.Get(name, labels...)
	return v
}

func matches(m *dto.Metric, labels []string) bool {
	for i := 0; i+1 < len(labels); i += 2 {
		ok := false
		for _, lp := range m.Label {
			if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

// Names lists the families, sorted.
func (f Families) Names() []string {
	out := make([]string, 0, len(f))
	for n := range f {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Dump formats the families whose name starts with prefix, one series a
// line, for failure messages.
func (f Families) Dump(prefix string) string {
	var b strings.Builder
	for _, n := range f.Names() {
		if !strings.HasPrefix(n, prefix) {
			continue
		}
		for _, m := range f[n].Metric {
			var ls []string
			for _, lp := range m.Label {
				ls = append(ls, lp.GetName()+"="+lp.GetValue())
			}
			fmt.Fprintf(&b, "%s{%s} %v\n", n, strings.Join(ls, ","), Families{n: &dto.MetricFamily{Metric: []*dto.Metric{m}}}.Value(n))
		}
	}
	return b.String()
}
