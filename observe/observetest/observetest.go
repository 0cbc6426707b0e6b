// Package observetest reads what mspd exports, for tests: a /metrics
// scrape parsed with Prometheus's own text parser, and the values of its
// series by name and labels.
package observetest

import (
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Families are a scrape's metric families by name.
type Families map[string]*dto.MetricFamily

// Parse parses the Prometheus text exposition format.
func Parse(r io.Reader) (Families, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(r)
}

// Scrape GETs url (a /metrics endpoint) as Prometheus would, asking for
// the text format, and parses the answer. It returns the raw text too.
func Scrape(url string) (Families, string, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return nil, "", err
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, "", err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, string(body), fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	fams, err := Parse(strings.NewReader(string(body)))
	return fams, string(body), err
}

// Labels selects series: every named label must have the given value.
type Labels map[string]string

// find returns the series of name matching sel.
func (f Families) find(name string, sel Labels) []*dto.Metric {
	mf := f[name]
	if mf == nil {
		return nil
	}
	var out []*dto.Metric
	for _, m := range mf.GetMetric() {
		if matches(m, sel) {
			out = append(out, m)
		}
	}
	return out
}

func matches(m *dto.Metric, sel Labels) bool {
	have := map[string]string{}
	for _, lp := range m.GetLabel() {
		have[lp.GetName()] = lp.GetValue()
	}
	for k, v := range sel {
		if have[k] != v {
			return false
		}
	}
	return true
}

// Value sums the counter, gauge or untyped values of name's series
// matching sel; 0 when there are none.
func (f Families) Value(name string, sel Labels) float64 {
	var sum float64
	for _, m := range f.find(name, sel) {
		switch {
		case m.Counter != nil:
			sum += m.Counter.GetValue()
		case m.Gauge != nil:
			sum += m.Gauge.GetValue()
		case m.Untyped != nil:
			sum += m.Untyped.GetValue()
		}
	}
	return sum
}

// Count sums the sample counts of name's histogram series matching sel.
func (f Families) Count(name string, sel Labels) uint64 {
	var n uint64
	for _, m := range f.find(name, sel) {
		n += m.GetHistogram().GetSampleCount()
	}
	return n
}

// Sum sums the sample sums of name's histogram series matching sel.
func (f Families) Sum(name string, sel Labels) float64 {
	var s float64
	for _, m := range f.find(name, sel) {
		s += m.GetHistogram().GetSampleSum()
	}
	return s
}

// Bucket sums the cumulative counts at upper bound le of name's histogram
// series matching sel.
func (f Families) Bucket(name string, sel Labels, le float64) uint64 {
	var n uint64
	for _, m := range f.find(name, sel) {
		for _, b := range m.GetHistogram().GetBucket() {
			if b.GetUpperBound() == le {
				n += b.GetCumulativeCount()
			}
		}
	}
	return n
}

// LabelValues lists every value label takes across name's series, sorted.
func (f Families) LabelValues(name, label string) []string {
	seen := map[string]bool{}
	for _, m := range f.find(name, nil) {
		for _, lp := range m.GetLabel() {
			if lp.GetName() == label {
				seen[lp.GetValue()] = true
			}
		}
	}
	out := make([]string, 0, len(seen))
	for v := range seen {
		out = append(out, v)
	}
	sort.Strings(out)
	return out
}
