package observe_test

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestOperationsDocListsEveryMetric: docs/operations.md's metrics table
// names every series mspd exports, and nothing it does not: a metric added
// or renamed without the table fails here.
func TestOperationsDocListsEveryMetric(t *testing.T) {
	raw, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(raw), "\n## Metrics\n")
	if !ok {
		t.Fatal("docs/operations.md has no \"## Metrics\" section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	documented := map[string]bool{}
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "| `mspd_") {
			continue
		}
		first, _, _ := strings.Cut(strings.TrimPrefix(line, "| "), " |")
		for _, m := range regexp.MustCompile("`(mspd_[a-z_]+)`").FindAllStringSubmatch(first, -1) {
			documented[m[1]] = true
		}
	}
	fams, err := populated(t).Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	exported := map[string]bool{}
	for _, f := range fams {
		exported[f.GetName()] = true
		if !documented[f.GetName()] {
			t.Errorf("docs/operations.md's metrics table lacks %s", f.GetName())
		}
	}
	for name := range documented {
		if !exported[name] {
			t.Errorf("docs/operations.md's metrics table names %s, which mspd does not export", name)
		}
	}
}
