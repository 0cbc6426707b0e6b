package observe_test

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestDashboardUsesExportedMetrics: every series the Grafana dashboard in
// deploy/ queries is one mspd exports, and the panels operators need are
// there. A renamed metric fails here rather than on a blank panel.
func TestDashboardUsesExportedMetrics(t *testing.T) {
	raw, err := os.ReadFile("../deploy/grafana/dashboards/mspd.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		UID    string `json:"uid"`
		Panels []struct {
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	fams, err := populated(t).Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	exported := map[string]bool{}
	for _, f := range fams {
		exported[f.GetName()] = true
	}
	series := regexp.MustCompile(`\bmspd_[a-z_]+`)
	var titles []string
	for _, p := range dash.Panels {
		titles = append(titles, p.Title)
		if p.Type != "row" && len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			for _, name := range series.FindAllString(tg.Expr, -1) {
				base := name
				for _, suffix := range []string{"_bucket", "_count", "_sum"} {
					if b, ok := strings.CutSuffix(name, suffix); ok && exported[b] {
						base = b
					}
				}
				if !exported[base] {
					t.Errorf("panel %q queries %s, which mspd does not export", p.Title, name)
				}
			}
		}
	}
	for _, want := range []string{
		"Provider error rate by errorKind", "Retries scheduled per minute", "Time to first token, p50 and p99",
		"Discarded output tokens per minute", "Retry budget tokens",
	} {
		if !slices.Contains(titles, want) {
			t.Errorf("dashboard lacks the panel %q", want)
		}
	}
}
